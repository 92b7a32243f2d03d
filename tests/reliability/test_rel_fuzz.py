"""Property-based fuzzing: random unicode, huge inputs and random JSON never crash or hang the
parser, any env's ``step``, the judge-expression parser or the config loader; bad input gets a
clear :class:`prm_gym.core.errors.PRMError` (a ``ValueError``) that names the problem.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import PRMError
from prm_gym.core.parsing import parse_action
from prm_gym.rewards.combine import parse_judge_spec
from prm_gym.training.cli import main as cli_main
from prm_gym.training.config import TrainConfig, parse_json_kwargs

FAST = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)
fragments = st.sampled_from(
    ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "<think>", "</think>", '{"name": ', '"arguments": {',
     "}", "{", "<tool_response>", "<|im_start|>", "\x00", "\ud800", "🙂", "\n", "calculator", "run_query", "search"]
)  # fmt: skip
actions = st.one_of(
    st.text(max_size=300),
    st.lists(fragments | st.text(max_size=10), max_size=30).map("".join),
    json_values.map(lambda v: "<tool_call>" + json.dumps(v) + "</tool_call>"),
    st.builds(
        lambda name, args: "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>",
        st.sampled_from(["calculator", "run_query", "describe_table", "list_tables", "search", "python", "nope"]),
        st.dictionaries(st.sampled_from(["expression", "sql", "table", "query", "code", "x"]), json_values, max_size=2),
    ),
)


@FAST
@given(actions)
def test_parser_never_raises(text: str) -> None:
    parsed = parse_action(text)
    assert parsed.ok == (not parsed.issues)
    assert not (parsed.ok and parsed.answer is None and not parsed.tool_calls)


@pytest.mark.parametrize("size", [10**5, 10**6, 10**7])
def test_parser_is_linear_on_huge_inputs(size: int) -> None:
    for text in ["<tool_call>" * (size // 11), "<" * size, "{" * size, "a" * size]:
        t0 = time.perf_counter()
        parsed = parse_action(text)
        assert not parsed.ok and time.perf_counter() - t0 < 2.0


@pytest.fixture(scope="module")
def live_envs() -> Any:
    made = {
        "prm/Math-v0": gym.make("prm/Math-v0", num_tasks=5, max_turns=10_000),
        "prm/SQL-v0": gym.make("prm/SQL-v0", num_tasks=5, max_turns=10_000),
        "prm/Search-v0": gym.make("prm/Search-v0", world_people=30, num_tasks=5, max_turns=10_000),
        "prm/Code-v0": gym.make("prm/Code-v0", num_tasks=3, max_turns=10_000, timeout_s=2.0),
    }
    yield made
    for env in made.values():
        env.close()


@pytest.mark.parametrize("env_id", ["prm/Math-v0", "prm/SQL-v0", "prm/Search-v0", "prm/Code-v0"])
def test_every_env_step_survives_random_actions(live_envs: Any, env_id: str) -> None:
    env = live_envs[env_id]

    @settings(
        max_examples=40 if env_id != "prm/Code-v0" else 15, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(actions)
    def check(action: str) -> None:
        env.reset(seed=0)
        t0 = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(action)
        assert time.perf_counter() - t0 < 8
        assert isinstance(obs, str) and math.isfinite(reward)
        assert info["reward_status"] in ("ok", "infra_error")
        assert math.isclose(
            reward, sum(v for k, v in info.items() if k.startswith("reward_") and k != "reward_status"), abs_tol=1e-6
        )

    check()


def test_every_env_rejects_non_text_and_huge_actions(live_envs: Any) -> None:
    for env in live_envs.values():
        for action in [None, 42, b"\xff\xfe", ["x"], "x" * 1_000_000]:
            env.reset(seed=0)
            _, reward, _, _, info = env.step(action)
            assert not info["parse"]["ok"] and reward <= 0


@FAST
@given(
    st.text(max_size=80)
    | st.lists(fragments | st.sampled_from(["rule/f1", "+", "*", "0.3", ";", "credit=min", "="]), max_size=12).map(
        " ".join
    )
)
def test_judge_expression_parser_fails_clearly(expr: str) -> None:
    try:
        spec = parse_judge_spec(expr)
    except PRMError as exc:
        assert isinstance(exc, ValueError) and str(exc)
    else:
        assert spec.items and all(math.isfinite(w) for w, _ in spec.items)


@FAST
@given(json_values.map(json.dumps) | st.text(max_size=60))
def test_config_kwargs_loader_fails_clearly(text: str) -> None:
    try:
        out = parse_json_kwargs("env_kwargs", text)
    except PRMError as exc:
        assert "env_kwargs" in str(exc)
    else:
        assert isinstance(out, dict)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.dictionaries(
        st.sampled_from(["steps", "group_size", "tasks_per_step", "lr", "seed", "checkpoint_every", "env_kwargs"]),
        json_values,
        max_size=4,
    )
)
def test_train_config_validation_fails_clearly(fields: dict[str, Any]) -> None:
    try:
        TrainConfig(**fields)
    except (PRMError, ValueError, TypeError) as exc:
        assert str(exc)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(
        st.text(max_size=12) | st.sampled_from(["--steps", "--lr", "--env-kwargs", "--algo", "-1", "nan"]), max_size=5
    )
)
def test_cli_rejects_random_argv_without_a_traceback(argv: list[str]) -> None:
    try:
        rc = cli_main(["--mode", "eval", "--eval.num-tasks", "-1", *argv])
    except SystemExit as exc:  # argparse/tyro usage errors exit 2 with a message
        assert exc.code in (0, 2)
    else:
        assert rc == 2
