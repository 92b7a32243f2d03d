"""prm/Math-v0: calculator safety, the task generator, file loaders, and scoring."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import TaskError, ToolError
from prm_gym.core.parsing import format_answer, format_tool_call
from prm_gym.envs.math.calculator import evaluate
from prm_gym.envs.math.tasks import LEVELS, generate_math_tasks, last_boxed, load_math_file
from prm_gym.rewards import math_worker
from prm_gym.rewards.rule import math_equal


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("2+3*4", "14"),
        ("(7-2)**2", "25"),
        ("10/4", "2.5"),
        ("sqrt(16) + abs(-2)", "6"),
        ("2^10", "1024"),
        ("-3 // 2", "-2"),
    ],
)
def test_calculator_values(expr: str, value: str) -> None:
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('true')",
        "open('/etc/passwd')",
        "9**9**9",
        "1/0",
        "x + 1",
        "(1)" * 1000,
        "(" * 5000 + "1" + ")" * 5000,
        "[1, 2]",
        "'a' * 10",
        "lambda: 1",
        "",
        "10**101",
        "sqrt(-1)",
    ],
)
def test_calculator_rejects(expr: str) -> None:
    with pytest.raises(ToolError):
        evaluate(expr)


def test_generator_is_deterministic_and_levelled() -> None:
    a = generate_math_tasks(50, seed=3, levels=(1, 2, 3, 4))
    b = generate_math_tasks(50, seed=3, levels=(1, 2, 3, 4))
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    assert {t.meta["level"] for t in a} == {1, 2, 3, 4}
    test = generate_math_tasks(50, seed=3, split="test")
    assert not {t.id for t in test} & {t.id for t in a}
    for t in generate_math_tasks(200, seed=1, levels=tuple(LEVELS)):
        assert math_equal(t.answer, t.answer)
    with pytest.raises(TaskError):
        generate_math_tasks(5, levels=(9,))
    with pytest.raises(TaskError):
        generate_math_tasks(5, split="dev")


def test_generated_answers_are_correct() -> None:
    for t in generate_math_tasks(100, seed=0, levels=(1,)):
        expr = t.prompt.removeprefix("What is ").removesuffix("?")
        assert math_equal(t.answer, evaluate(expr)), t.prompt


def test_loaders(tmp_path: Path) -> None:
    gsm = tmp_path / "gsm8k.jsonl"
    gsm.write_text(
        json.dumps({"question": "Tom has 3 apples and buys 1,200 more.", "answer": "3 + 1200 = 1203\n#### 1,203"})
        + "\n\n"
        + json.dumps({"question": "q2", "answer": "#### -4"})
        + "\n"
    )
    ts = load_math_file(gsm)
    assert [t.answer for t in ts] == ["1203", "-4"] and ts[0].id == "line-1"
    math = tmp_path / "math.jsonl"
    math.write_text(
        json.dumps({"problem": "p", "solution": "so \\boxed{\\frac{1}{2}} done", "level": "Level 2"}) + "\n"
    )
    assert load_math_file(math)[0].answer == "\\frac{1}{2}"
    assert last_boxed("\\boxed{a{b}c} and \\boxed{x^{2}}") == "x^{2}"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"question": "q", "answer": "3 + 4 = 7\\nso seven"}\n', "####"),
        ('{"question": "q"}\n', "missing field 'answer'"),
        ('{"problem": "p", "solution": "no box"}\n', "boxed"),
        ('{"foo": 1}\n', "expected GSM8K"),
        ('{"question": "q", "answer": "#### 1"}\n{broken\n', ":2: not valid JSON"),
        ("[1, 2]\n", "JSON object"),
        ("", "no tasks"),
    ],
)
def test_loader_errors_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(TaskError, match=message):
        load_math_file(f)


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="does not exist"):
        load_math_file(tmp_path / "nope.jsonl")
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(TaskError, match="UTF-8"):
        load_math_file(binary)


def test_episode_scores_correct_and_wrong_answers() -> None:
    env = gym.make("prm/Math-v0", levels=(1,))
    obs, info = env.reset(seed=0)
    task = env.unwrapped.task
    obs, r, term, trunc, info = env.step(format_tool_call("calculator", {"expression": "1+1"}))
    assert obs == "<tool_response>\n2\n</tool_response>" and r == 0.0 and info["tool"]["calls"] == 1
    obs, r, term, trunc, info = env.step(format_tool_call("calculator", {"expression": "1/0"}))
    assert "division by zero" in obs and info["reward_tool"] == pytest.approx(-0.1) and not info["tool"]["ok"]
    obs, r, term, trunc, info = env.step(format_tool_call("calculator", {"expr": "1"}))
    assert "missing arguments" in obs
    obs, r, term, trunc, info = env.step(format_answer(task.answer))
    assert term and not trunc and r == 1.0 and info["reward_outcome"] == 1.0 and info["answer"] == task.answer
    env.reset(seed=0)
    _, r, term, _, info = env.step(format_answer("not a number"))
    assert term and r == 0.0 and info["judge"]["rule/math_equiv"]["score"] == 0.0


def test_equivalent_forms_count() -> None:
    assert math_equal("1/2", "0.5") and math_equal("\\frac{1}{2}", "0.5") and math_equal("1203", "1,203")
    assert not math_equal("3", "4")


def test_truncation_after_max_turns() -> None:
    env = gym.make("prm/Math-v0", max_turns=3)
    env.reset(seed=1)
    flags = [env.step("thinking...")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


def test_math_verify_off_the_main_thread() -> None:
    results: list[bool] = []
    t = threading.Thread(target=lambda: results.append(math_equal("\\frac{3}{4}", "0.75")))
    t.start()
    t.join(30)
    assert results == [True]


def test_user_task_file_through_gym_make(tmp_path: Path) -> None:
    f = tmp_path / "gsm.jsonl"
    f.write_text(json.dumps({"id": "g1", "question": "What is 6 times 7?", "answer": "#### 42"}) + "\n")
    env = gym.make("prm/Math-v0", tasks=str(f))
    obs, info = env.reset(seed=0)
    assert info["task_id"] == "g1" and obs.startswith("What is 6 times 7?")
    assert env.step("<answer>42</answer>")[1] == 1.0


def test_a_hostile_answer_ends_the_episode_scored_wrong_within_the_limit() -> None:
    """The issue's reproduction: env.step on 9^{9^{9^{9}}} from a worker thread, a 2 s limit."""
    env = gym.make("prm/Math-v0", judge_kwargs={"rule/math_equiv": {"timeout_s": 2.0}})
    env.reset(seed=0)
    out: list[tuple[float, dict, float]] = []

    def step() -> None:
        start = time.monotonic()
        _, reward, _, _, info = env.step("<answer>9^{9^{9^{9}}}</answer>")
        out.append((reward, info, time.monotonic() - start))

    worker = threading.Thread(target=step)
    worker.start()
    worker.join(60)
    assert out, "env.step hung on a hostile answer"
    reward, info, elapsed = out[0]
    # 2 s of CPU time: on a loaded machine longer in wall clock, within the bound (plus a child's start)
    assert reward == 0.0 and info["reward_status"] == "ok" and elapsed < math_worker.WALL_FACTOR * 2.0 + 5.0
    env.close()
