"""The calculator under attack: every call ends in a result or a tool error within its deadline.

Expressions run in a child process so that one that holds the GIL (``round(5, -10**8)`` did, for
minutes) fails the test at the wall-clock guard instead of hanging it; the child reports each
call's CPU time, which is what the stated deadline (``calculator.DEADLINE_S``) bounds.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.parsing import format_tool_call
from prm_gym.envs.math.calculator import DEADLINE_S

ROOT = Path(__file__).resolve().parents[2]
#: Wall-clock guard per call: only catches a hang (the machine may be loaded); CPU time is asserted.
HANG_S = 10.0
_CHILD = """
import json, sys, time
from prm_gym.core.errors import ToolError
from prm_gym.envs.math.calculator import evaluate
for line in sys.stdin:
    expr = json.loads(line)
    start = time.thread_time()
    try:
        evaluate(expr)
        kind = "ok"
    except ToolError:
        kind = "tool_error"
    except BaseException as exc:
        kind = type(exc).__name__
    print(json.dumps({"kind": kind, "cpu_s": time.thread_time() - start}), flush=True)
"""


class Evaluator:
    """A child process that evaluates expressions one at a time, killed when one hangs."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def __call__(self, expr: str) -> dict[str, object]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(expr) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], HANG_S)
        if not ready:
            self.proc.kill()
            self.proc.wait()
            self.__init__()  # type: ignore[misc]  # a fresh child for the next example
            pytest.fail(f"no answer within {HANG_S}s wall clock for {expr[:120]!r}")
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def calc() -> Iterator[Evaluator]:
    ev = Evaluator()
    yield ev
    ev.close()


def _assert_bounded(calc: Evaluator, expr: str) -> None:
    out = calc(expr)
    assert out["kind"] in ("ok", "tool_error"), (expr, out)
    assert float(out["cpu_s"]) < DEADLINE_S, (expr, out)  # type: ignore[arg-type]


ISSUE_EXAMPLES = [
    "round(5, -10**8)",
    "round(5, -10**100)",
    "round(10**100, -10**6)",
    "round(1e100, -10**100)",
    "round(-7, -99999999)",
    "(10**100)**1000",
    "(10**100-1)**999 % 7",
    "2**2**2**2**2",
    "9**9**9",
    "10**100 * 10**100 * 10**100",
    "1" * 499,
    "0x" + "f" * 400,
    "1" + "_0" * 240,
    "1 << 10**8",
    "2 >> -1",
    "factorial(10**6)",
    "pow(10, 10**8)",
    "int('9' * 5000)",
    "str(10**100)",
    "round(round(round(5, -300), -300), -300) ** 1000",
    "max(10**100, 10**99) ** max(1000, 999)",
    "floor(10**100) ** 3",
    "log(1, 1)",
]


@pytest.mark.parametrize("expr", ISSUE_EXAMPLES)
def test_issue_examples_end_within_the_deadline(calc: Evaluator, expr: str) -> None:
    _assert_bounded(calc, expr)


_NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.integers(1, 450).map(lambda n: "9" * n),
    st.sampled_from(["1e308", "1e-308", "0.5", "-0.0", "1_000_000", "0x" + "f" * 80, "0b" + "1" * 300, "pi", "e"]),
    st.sampled_from(["10**8", "-10**8", "10**100", "-10**100", "10**99", "2**332", "1000", "-1000"]),
)
_BINARY = ["+", "-", "*", "/", "//", "%", "**", "^", "<<", ">>", "&", "|", "×", "÷"]
_FUNCS = ["round", "pow", "factorial", "int", "str", "sqrt", "abs", "min", "max", "log", "exp", "floor", "ceil"]


def _compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, st.sampled_from(_BINARY), inner).map(lambda t: f"({t[0]}){t[1]}({t[2]})"),
        st.tuples(inner, inner, inner).map(lambda t: f"{t[0]}**{t[1]}**{t[2]}"),
        st.tuples(st.sampled_from(["-", "+", "~", "not "]), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(_FUNCS), st.lists(inner, min_size=1, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"
        ),
        st.tuples(inner, inner).map(lambda t: f"round({t[0]}, -({t[1]}))"),
    )


EXPRESSIONS = st.recursive(_NUMBERS, _compound, max_leaves=12)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # the recursive strategy's repr
@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(expr=EXPRESSIONS)
def test_hostile_expressions_end_in_a_result_or_a_tool_error_within_the_deadline(calc: Evaluator, expr: str) -> None:
    _assert_bounded(calc, expr)


def test_a_stalling_calculator_call_no_longer_stalls_the_step() -> None:
    """The issue's report, end to end: env.step on prm/Math-v0 returns a scored tool error."""
    call = format_tool_call("calculator", {"expression": "round(5, -10**8)"})
    code = (
        "import json, gymnasium as gym, prm_gym\n"
        "env = gym.make('prm/Math-v0')\nenv.reset(seed=0)\n"
        f"obs, r, term, trunc, info = env.step({call!r})\n"
        "print(json.dumps({'obs': obs, 'status': info['reward_status'], 'ok': info['tool']['ok'], 'r': r}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("env.step did not return within 60 s")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok" and out["ok"] is False and "round" in out["obs"] and out["r"] < 0


def test_in_process_step_is_fast_and_scored() -> None:
    env = gym.make("prm/Math-v0")
    env.reset(seed=0)
    _, r, _, _, info = env.step(format_tool_call("calculator", {"expression": "2**332 * 2"}))
    assert info["reward_status"] == "ok" and not info["tool"]["ok"] and info["tool"]["latency_s"] < DEADLINE_S
    env.close()
