"""Model-based scorers on tiny real models: discriminative PRM, implicit PRM, progress scorers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import parse_action
from prm_gym.core.policy import FakePolicy
from prm_gym.core.tasks import Task
from prm_gym.core.tools import ToolResult
from prm_gym.rewards.implicit import ImplicitPRM, turn_rewards
from prm_gym.rewards.lm import messages_before, prompt_ids, target_logprobs
from prm_gym.rewards.prm import DiscriminativePRM
from prm_gym.rewards.progress import MonteCarloProgressJudge
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

TASK = Task("t1", "What is 6 times 7?", "42")
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'


def _turn(action: str, index: int = 0, results: tuple[ToolResult, ...] = (), history: Any = ()) -> Turn:
    parsed = parse_action(action)
    return Turn(TASK, index, action, parsed, results, tuple(history), parsed.answer is not None)


def _save_tiny_prm(path: Path, head: str) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification, LlamaForTokenClassification

    from prm_gym.core.models import tiny_tokenizer

    tok = tiny_tokenizer()
    tok.add_tokens(["<extra_0>"], special_tokens=True)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    config.num_labels = 2
    with torch.random.fork_rng():
        torch.manual_seed(0)
        cls = LlamaForTokenClassification if head == "separator" else LlamaForSequenceClassification
        cls(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_implicit_turn_rewards_pure() -> None:
    out = turn_rewards([-1.0, -0.5, -2.0, -0.1], [-1.5, -0.5, -1.0, -0.3], [-1, 0, 1, 1], beta=0.5)
    assert out == pytest.approx([0.0, 0.5 * (-1.0 + 0.2)])
    with pytest.raises(ValueError):
        turn_rewards([0.0], [0.0, 0.0], [0])


def test_implicit_prm_matches_log_ratio(tiny_policy: Any) -> None:
    from prm_gym.agents.hf import HFPolicy

    ref = HFPolicy.from_id("hf:tiny", seed=1)
    judge = ImplicitPRM(policy=tiny_policy, ref=ref, beta=0.1)
    turn = _turn(CALL)
    verdict = score_batch(judge, [turn])[0]
    tok = tiny_policy.tokenizer
    prefix = prompt_ids(tok, messages_before(turn))
    target = tok.encode(CALL, add_special_tokens=False)
    expected = 0.1 * (
        sum(target_logprobs(tiny_policy.model, prefix, target)) - sum(target_logprobs(ref.model, prefix, target))
    )
    assert math.isclose(verdict.score, expected, rel_tol=1e-5) and verdict.score != 0.0
    same = ImplicitPRM(policy=tiny_policy, ref=tiny_policy)
    assert score_batch(same, [turn])[0].score == 0.0  # identical models: no implicit reward


def test_mc_progress_with_a_policy_that_needs_the_tool(tiny_tokenizer: Any) -> None:
    def script(prompt: str, i: int) -> str:  # answers right only once the tool result is visible
        return "<answer>42</answer>" if "<tool_response>\n42" in prompt else "<answer>41</answer>"

    judge = MonteCarloProgressJudge(policy=FakePolicy(tiny_tokenizer, script), samples=3, horizon=1)
    helpful = _turn(CALL, results=(ToolResult("calculator", True, "42"),))
    useless = _turn("Hmm, let me think.")
    final_right, final_wrong = _turn("<answer>42</answer>"), _turn("<answer>40</answer>")
    scores = [v.score for v in score_batch(judge, [helpful, useless, final_right, final_wrong])]
    assert scores == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("mode", ["separator", "classifier"])
def test_discriminative_prm_from_local_dir(tmp_path: Path, mode: str) -> None:
    path = _save_tiny_prm(tmp_path / "prm", mode)
    judge = make_judge("prm/discriminative", path=str(path), mode=mode, batch_size=2)
    assert isinstance(judge, DiscriminativePRM)
    turns = [
        _turn("6 times 7.\n\nThat is 42.\n\n<answer>42</answer>"),
        _turn(CALL),
        _turn("Step one.", 1, history=[(CALL, "42")]),
    ]
    verdicts = score_batch(judge, turns)
    assert len(verdicts) == 3 and all(0.0 <= v.score <= 1.0 for v in verdicts)
    if mode == "separator":
        steps = [float(p) for p in verdicts[0].detail.split(",")]
        assert len(steps) == 3 and math.isclose(verdicts[0].score, min(steps), abs_tol=1e-3)
        alone = score_batch(judge, turns[:1])[0]  # batching and padding do not change a score
        assert math.isclose(alone.score, verdicts[0].score, abs_tol=1e-5)


def test_discriminative_prm_needs_a_local_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        DiscriminativePRM(str(tmp_path / "missing"))


def test_env_mixes_model_scorers_with_rules() -> None:
    import gymnasium as gym

    import prm_gym.envs  # noqa: F401

    expr = "rule/math_equiv + 0.1*prm/implicit + 0.1*progress/info_gain"
    env = gym.make("prm/Math-v0", judge=expr)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(CALL)
    assert info["reward_status"] == "ok"
    assert set(info["judge"]) == {"prm/implicit", "progress/info_gain"}  # math_equiv is final-only
    parts = [info[k] for k in info if k.startswith("reward_") and k != "reward_status"]
    assert math.isclose(sum(parts), reward, abs_tol=1e-6)
    env.close()
