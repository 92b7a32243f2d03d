"""PAV/SPA Monte-Carlo progress: multi-turn rollouts, a budget, and cached shared prefixes."""

from __future__ import annotations

from typing import Any

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import parse_action
from prm_gym.core.policy import FakePolicy
from prm_gym.core.tasks import Task
from prm_gym.core.tools import Tool, ToolResult
from prm_gym.rewards.progress import MonteCarloProgressJudge
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.types import Turn

TASK = Task("t1", "What is 6 times 7?", "42")
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
HELLO = '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>'


def calculator(expression: str) -> str:
    """A calculator for the rollouts.

    Args:
        expression: digits and * only.
    """
    a, b = expression.split("*") if "*" in expression else (expression, "1")
    return str(int(a) * int(b))


def _turn(action: str, results: tuple[ToolResult, ...] = (), history: Any = ()) -> Turn:
    parsed = parse_action(action)
    return Turn(TASK, len(history), action, parsed, results, tuple(history), parsed.answer is not None)


def _agent(tokenizer: Any) -> FakePolicy:
    """Calls the calculator first and answers with what it returned: solving takes two turns."""

    def script(prompt: str, i: int) -> str:
        return "<answer>42</answer>" if "<tool_response>\n42" in prompt else CALL

    return FakePolicy(tokenizer, script)


def test_rollouts_run_several_turns_with_the_tools(tiny_tokenizer: Any) -> None:
    """Solving needs a tool call and then an answer: one-turn continuations (the old judge) never
    see a success, so every state has value 0; two-turn rollouts with the tool do."""
    useless = _turn(HELLO, (ToolResult("calculator", True, "2"),))
    final = _turn("<answer>42</answer>")
    short = MonteCarloProgressJudge(
        policy=_agent(tiny_tokenizer), samples=2, horizon=1, tools={"calculator": calculator}, max_new_tokens=128
    )
    assert [v.score for v in score_batch(short, [useless, final])] == [0.0, 1.0]  # V(start) = 0 at horizon 1
    deep = MonteCarloProgressJudge(
        policy=_agent(tiny_tokenizer),
        samples=2,
        horizon=2,
        tools={"calculator": Tool.from_function(calculator)},
        max_new_tokens=128,
    )
    verdicts = score_batch(deep, [useless, final])
    assert [v.detail for v in verdicts] == ["1.00->1.00", "1.00->1.00"]
    assert [v.score for v in verdicts] == [0.0, 0.0]  # the agent would have solved it anyway: no progress
    no_tools = MonteCarloProgressJudge(policy=_agent(tiny_tokenizer), samples=2, horizon=3, max_new_tokens=128)
    assert score_batch(no_tools, [final])[0].detail == "0.00->1.00"  # "not available": never solved


def test_budget_caps_sampled_turns(tiny_tokenizer: Any) -> None:
    policy = _agent(tiny_tokenizer)
    judge = MonteCarloProgressJudge(
        policy=policy, samples=4, horizon=2, budget=6, tools={"calculator": calculator}, max_new_tokens=128
    )
    verdict = score_batch(judge, [_turn("<answer>42</answer>")])[0]
    # 4 first turns, then only 2 of the 4 rollouts may take their second turn: V = 2/4
    assert policy.calls == 6 and judge.sampled_turns == 6 and verdict.detail == "0.50->1.00"


def test_shared_prefixes_are_rolled_out_once(tiny_tokenizer: Any) -> None:
    policy = _agent(tiny_tokenizer)
    judge = MonteCarloProgressJudge(
        policy=policy, samples=2, horizon=2, tools={"calculator": calculator}, max_new_tokens=128
    )
    first = _turn(CALL, (ToolResult("calculator", True, "42"),))
    score_batch(judge, [first])
    calls = policy.calls  # V(start) (2 rollouts x 2 turns) and V(after the call) (2 x 1)
    assert calls == 6
    # the same start state again, in a group of two siblings: nothing new for the start
    sibling = _turn(HELLO, (ToolResult("calculator", True, "2"),))
    score_batch(judge, [first, sibling])
    assert policy.calls == calls + 4  # only V(after sibling): 2 rollouts x 2 turns


def test_runs_on_hf_tiny(tiny_policy: Any) -> None:
    judge = MonteCarloProgressJudge(policy=tiny_policy, samples=2, horizon=2, max_new_tokens=8)
    verdict = score_batch(judge, [_turn(CALL)])[0]
    assert -1.0 <= verdict.score <= 1.0 and verdict.tokens and verdict.tokens > 0


def test_bad_options() -> None:
    with pytest.raises(ConfigError):
        MonteCarloProgressJudge(horizon=0)
    with pytest.raises(ConfigError):
        MonteCarloProgressJudge(check="fuzzy")
