"""IGPO (arXiv 2510.14967): the turn reward is the change in the policy's probability of the gold
answer, batched over the group, and the outcome on the answering turn."""

from __future__ import annotations

import math
from typing import Any

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.core.tools import ToolResult
from prm_gym.rewards.info_gain import InfoGainJudge, answer_probability, outcome_score
from prm_gym.rewards.lm import batched_target_logprobs, messages_after, messages_before, prompt_ids, target_logprobs
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
TASKS = [Task("a", "What is 6 times 7?", "42"), Task("b", "Who wrote Hamlet?", "William Shakespeare")]


def _turn(task: Task, action: str, results: tuple[ToolResult, ...] = (), history: Any = ()) -> Turn:
    parsed = parse_action(action)
    return Turn(task, len(history), action, parsed, results, tuple(history), parsed.answer is not None)


def _probability(policy: Any, messages: list[dict[str, str]], gold: str) -> float:
    tok = policy.tokenizer
    target = tok.encode(f"<answer>{gold}</answer>", add_special_tokens=False)
    lps = target_logprobs(policy.model, prompt_ids(tok, messages), target)
    return math.exp(sum(lps) / len(lps))


def test_answer_probability_is_the_geometric_mean() -> None:
    """The worked example of docs/judges.md: token probs 0.5 and 0.2 -> sqrt(0.1) = 0.3162."""
    assert answer_probability([math.log(0.5), math.log(0.2)]) == pytest.approx(math.sqrt(0.1))
    # a turn moving the answer's mean log-prob from log 0.1 to log 0.4 gains 0.3 (not log 4 = 1.386)
    assert answer_probability([math.log(0.4)]) - answer_probability([math.log(0.1)]) == pytest.approx(0.3)


def test_gain_is_the_change_in_gold_probability(tiny_policy: Any) -> None:
    judge = InfoGainJudge(policy=tiny_policy)
    turn = _turn(TASKS[0], CALL, (ToolResult("calculator", True, "42"),))
    verdict = score_batch(judge, [turn])[0]
    before = _probability(tiny_policy, messages_before(turn), "42")
    after = _probability(tiny_policy, messages_after(turn), "42")
    assert verdict.score == pytest.approx(after - before, rel=1e-4, abs=1e-9)
    assert -1.0 <= verdict.score <= 1.0 and verdict.score != 0.0
    # the old definition (difference of mean log-probs) is a different number
    assert not math.isclose(verdict.score, math.log(after) - math.log(before), rel_tol=1e-3)


def test_a_whole_group_in_one_forward_pass_equals_one_by_one(tiny_policy: Any) -> None:
    history = [(CALL, "<tool_response>\n42\n</tool_response>")]
    group = [
        _turn(TASKS[0], CALL, (ToolResult("calculator", True, "42"),)),
        _turn(TASKS[0], '<tool_call>{"name": "calculator", "arguments": {"expression": "6+7"}}</tool_call>'),
        _turn(TASKS[1], '<tool_call>{"name": "search", "arguments": {"query": "Hamlet author"}}</tool_call>'),
        _turn(TASKS[0], CALL, (), history),
    ]
    calls = []
    handle = tiny_policy.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        batched = InfoGainJudge(policy=tiny_policy, cache_size=0)
        together = [v.score for v in score_batch(batched, group)]
        assert len(calls) == 1  # 8 contexts (before and after of each turn), one padded pass
        alone = [score_batch(InfoGainJudge(policy=tiny_policy, cache_size=0), [t])[0].score for t in group]
    finally:
        handle.remove()
    assert together == pytest.approx(alone, rel=1e-4, abs=1e-7)


def test_padding_does_not_change_a_row(tiny_policy: Any) -> None:
    tok = tiny_policy.tokenizer
    rows = [([5, 6, 7, 8, 9, 10], [11, 12]), ([5, 6], [13])]
    together = batched_target_logprobs(tiny_policy.model, rows, tok.pad_token_id)
    for row, got in zip(rows, together, strict=True):
        assert got == pytest.approx(target_logprobs(tiny_policy.model, *row), abs=1e-5)


def test_cache_reuses_the_previous_turns_after(tiny_policy: Any) -> None:
    judge = InfoGainJudge(policy=tiny_policy)
    turn = _turn(TASKS[0], CALL)
    score_batch(judge, [turn])
    passes = judge.forward_passes
    score_batch(judge, [turn])
    assert judge.forward_passes == passes  # both contexts cached


def test_final_turn_is_rewarded_by_the_outcome(tiny_policy: Any) -> None:
    judge = make_judge("progress/info_gain", policy=tiny_policy)
    right = _turn(TASKS[1], "<answer>Shakespeare</answer>")
    wrong = _turn(TASKS[1], "<answer>Marlowe</answer>")
    scores = [v.score for v in score_batch(judge, [right, wrong])]
    assert scores == pytest.approx([2 / 3, 0.0])  # SQuAD F1: precision 1, recall 1/2
    assert isinstance(judge, InfoGainJudge) and judge.forward_passes == 0
    gain_everywhere = InfoGainJudge(policy=tiny_policy, final="gain")
    assert score_batch(gain_everywhere, [right])[0].detail.count("->") == 1
    assert outcome_score("42", "42", "math") == 1.0 and outcome_score(None, "42") == 0.0


def test_bad_options() -> None:
    with pytest.raises(ConfigError):
        InfoGainJudge(final="sum")
    with pytest.raises(ConfigError):
        InfoGainJudge(answer_template="no slot")
