"""ToolRL call-matching terms and the OTC efficiency term, standalone and inside a real env."""

from __future__ import annotations

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import JudgeError
from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

REF = {"reference_calls": [{"name": "search", "arguments": {"query": "Paris", "k": 3}}]}


def turn(action: str, meta: dict | None = None, history: tuple = (), answer: str = "4") -> Turn:
    task = Task("t", "q", answer, meta if meta is not None else REF)
    parsed = parse_action(action)
    return Turn(task, len(history), action, parsed, (), history, parsed.answer is not None)


def call(name: str, args: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'


def scores(judge_id: str, action: str, meta: dict | None = None) -> float:
    return make_judge(judge_id).score([turn(action, meta)])[0].score  # type: ignore[union-attr]


def test_call_matching_terms_grade_name_params_and_values() -> None:
    exact = call("search", '{"query": "Paris", "k": "3"}')
    assert [scores(j, exact) for j in ("tool/format", "tool/name", "tool/params", "tool/values")] == [1, 1, 1, 1]
    wrong_value = call("search", '{"query": "Lyon", "k": 3}')
    assert scores("tool/params", wrong_value) == 1.0 and scores("tool/values", wrong_value) == 0.5
    extra_param = call("search", '{"query": "Paris", "lang": "fr"}')
    assert scores("tool/params", extra_param) == pytest.approx(1 / 3)
    assert scores("tool/values", extra_param) == 0.5
    wrong_tool = call("lookup", '{"query": "Paris", "k": 3}')
    assert [scores(j, wrong_tool) for j in ("tool/name", "tool/params", "tool/values")] == [0, 0, 0]
    two = exact + wrong_tool
    assert scores("tool/name", two) == 0.5


def test_no_reference_or_no_call_scores_zero_and_bad_reference_raises() -> None:
    good = call("search", '{"query": "Paris"}')
    assert scores("tool/name", good, meta={}) == 0.0
    assert scores("tool/values", "<answer>x</answer>") == 0.0
    assert scores("tool/format", "<tool_call>{broken</tool_call>") == 0.0
    with pytest.raises(JudgeError, match="reference call"):
        scores("tool/name", good, meta={"reference_call": {"arguments": {}}})


def test_efficiency_rewards_correct_answers_reached_with_fewer_calls() -> None:
    judge = make_judge("tool/efficiency")
    calc = call("calculator", '{"expression": "2+2"}')
    meta = {"optimal_calls": 1}
    direct = turn("<answer>4</answer>", meta)
    one = turn("<answer>4</answer>", meta, history=((calc, "4"),))
    three = turn("<answer>4</answer>", meta, history=((calc, "4"),) * 3)
    wrong = turn("<answer>5</answer>", meta, history=((calc, "4"),))
    got = [v.score for v in judge.score([direct, one, three, wrong])]  # type: ignore[union-attr]
    assert got == [1.0, 1.0, pytest.approx(0.5), 0.0]


def test_tool_terms_flow_through_a_real_env() -> None:
    env = gym.make("prm/Math-v0", judge="rule/math_equiv + 0.2*tool/format + 0.5*tool/efficiency", levels=[1])
    env.reset(seed=0)
    task = env.unwrapped._task  # type: ignore[attr-defined]
    expr = task.prompt.split("What is ")[-1].split("?")[0]
    _, r1, _, _, info1 = env.step(call("calculator", f'{{"expression": "{expr}"}}'))
    assert info1["reward_tool_format"] == pytest.approx(0.2) and "reward_tool_efficiency" in info1
    assert info1["reward_tool_efficiency"] == 0.0  # a final-scope term: nothing before the answer
    obs, r2, term, _, info2 = env.step(f"<answer>{task.answer}</answer>")
    assert term and info2["reward_outcome"] == 1.0
    assert info2["reward_tool_efficiency"] == pytest.approx(0.5)  # one call, optimal one
    assert r2 == pytest.approx(1.0 + 0.2 + 0.5)
