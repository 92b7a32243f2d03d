"""``progress/info_gain`` as IGPO's authors run it: the belief is the gold span's probability alone
(``belief="span"``) under the policy being trained (``policy="current"``), and the answer turn
scores the outcome alone."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import pytest
import torch

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.hf import HFPolicy
from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.core.tools import ToolResult
from prm_gym.rewards.info_gain import InfoGainJudge, outcome_score
from prm_gym.rewards.lm import messages_after, messages_before, prompt_ids, target_logprobs
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.types import Turn
from prm_gym.training.worker import bind_current_policy

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
TASK = Task("a", "What is 6 times 7?", "42")


def _turn(action: str, results: tuple[ToolResult, ...] = ()) -> Turn:
    parsed = parse_action(action)
    return Turn(TASK, 0, action, parsed, results, (), parsed.answer is not None)


def _span_probability(policy: Any, messages: list[dict[str, str]], gold: str) -> float:
    tok = policy.tokenizer
    ids = tok.encode(f"<answer>{gold}</answer>", add_special_tokens=False)
    start = len(tok.encode("<answer>", add_special_tokens=False))
    end = len(ids) - len(tok.encode("</answer>", add_special_tokens=False))
    # the opening tag is context, only the gold's own tokens are scored
    lps = target_logprobs(policy.model, prompt_ids(tok, messages) + ids[:start], ids[start:end])
    return math.exp(sum(lps) / len(lps))


def test_span_belief_scores_the_gold_tokens_alone(tiny_policy: Any) -> None:
    turn = _turn(CALL, (ToolResult("calculator", True, "42"),))
    span = score_batch(InfoGainJudge(policy=tiny_policy, belief="span"), [turn])[0].score
    want = _span_probability(tiny_policy, messages_after(turn), "42") - _span_probability(
        tiny_policy, messages_before(turn), "42"
    )
    assert span == pytest.approx(want, rel=1e-4, abs=1e-9)
    tags = score_batch(InfoGainJudge(policy=tiny_policy), [turn])[0].score
    assert not math.isclose(span, tags, rel_tol=1e-3)  # the template belief (tags included) differs


def test_the_answer_turn_scores_the_outcome_alone(tiny_policy: Any) -> None:
    judge = InfoGainJudge(policy=tiny_policy, belief="span", final="outcome", outcome="f1")
    right, wrong = _turn("<answer>42</answer>"), _turn("<answer>41</answer>")
    scores = [v.score for v in score_batch(judge, [right, wrong])]
    assert scores == [outcome_score("42", "42"), outcome_score("41", "42")] == [1.0, 0.0]
    assert judge.forward_passes == 0  # no gain computed for the answer turn


def test_the_belief_reads_the_current_weights() -> None:
    policy = HFPolicy.from_id("hf:tiny", seed=0)
    judge = InfoGainJudge(policy=policy, belief="span")
    turn = _turn(CALL, (ToolResult("calculator", True, "42"),))
    before = score_batch(judge, [turn])[0].score
    with torch.no_grad():  # a learner step: new weights, a new version
        policy.model.get_output_embeddings().weight.mul_(3.0)
    assert score_batch(judge, [turn])[0].score == before  # same version: the cache answers
    policy.version += 1
    after = score_batch(judge, [turn])[0].score
    assert not math.isclose(after, before, rel_tol=1e-3)
    fresh = InfoGainJudge(policy=policy, belief="span", cache_size=0)
    assert score_batch(fresh, [turn])[0].score == pytest.approx(after, rel=1e-5)


def test_the_worker_binds_current_to_the_policy_it_samples_with() -> None:
    policy = HFPolicy.from_id("hf:tiny", seed=0)
    kwargs: dict[str, Any] = {
        "judge": "progress/info_gain",
        "judge_kwargs": {"progress/info_gain": {"policy": "current"}},
    }
    bound = bind_current_policy(kwargs, policy)
    assert kwargs["judge_kwargs"]["progress/info_gain"]["policy"] == "current"  # the spec is left as it was
    env = gym.make("prm/Math-v0", levels=[1], num_tasks=2, **bound)
    judge = next(j for _, j in env.unwrapped.judges if j.name == "progress/info_gain")  # type: ignore[attr-defined]
    assert isinstance(judge, InfoGainJudge) and judge.policy is policy
    env.close()
    with pytest.raises(ConfigError, match="in-process"):
        bind_current_policy(kwargs, object())
    with pytest.raises(ConfigError, match="current"):
        _ = InfoGainJudge(policy="current").policy


def test_span_belief_needs_text_around_the_answer() -> None:
    with pytest.raises(ConfigError, match="span"):
        InfoGainJudge(belief="span", answer_template="{answer}")
    with pytest.raises(ConfigError, match="belief"):
        InfoGainJudge(belief="gold")
