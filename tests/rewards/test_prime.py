"""PRIME's online implicit PRM: cross-entropy on outcome labels, reference = initial policy."""

from __future__ import annotations

from typing import Any

import pytest

from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards.prime import OnlineImplicitPRM, PRMSample, prime_advantages
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

PROMPT = [{"role": "user", "content": "What is 6 times 7?"}]


def _samples(prm: OnlineImplicitPRM, answers: list[tuple[str, float]]) -> list[PRMSample]:
    from prm_gym.rewards.lm import prompt_ids

    prefix = prompt_ids(prm.tokenizer, PROMPT)
    out = []
    for text, outcome in answers:
        target = list(prm.tokenizer.encode(text, add_special_tokens=False))
        out.append(PRMSample(prefix + target, [False] * len(prefix) + [True] * len(target), outcome))
    return out


def _separation(prm: OnlineImplicitPRM, samples: list[PRMSample]) -> float:
    rewards = prm.sequence_rewards(samples)
    good = [r for r, s in zip(rewards, samples, strict=True) if s.outcome == 1.0]
    bad = [r for r, s in zip(rewards, samples, strict=True) if s.outcome == 0.0]
    return sum(good) / len(good) - sum(bad) / len(bad)


def test_online_update_lowers_the_loss_and_separates_outcomes(tiny_policy: Any) -> None:
    prm = OnlineImplicitPRM(policy=tiny_policy, beta=0.05, lr=3e-3)
    train = _samples(prm, [("<answer>42</answer>", 1.0), ("It is 42. <answer>42</answer>", 1.0),
                           ("<answer>41</answer>", 0.0), ("It is 48. <answer>48</answer>", 0.0)])  # fmt: skip
    held_out = _samples(prm, [("So <answer>42</answer>", 1.0), ("So <answer>41</answer>", 0.0)])
    first = float(prm.loss(train))
    assert _separation(prm, train) == 0.0  # pi_phi starts as pi_ref: every implicit reward is 0
    losses = [prm.update(train) for _ in range(6)]
    assert losses[0] == pytest.approx(first, rel=1e-5)
    last = float(prm.loss(train))
    print(f"PRIME toy run: loss {first:.4f} -> {last:.4f}; separation {_separation(prm, train):.4f}")
    assert last < first - 0.01 and prm.steps == 6
    assert _separation(prm, train) > 0.0 and _separation(prm, held_out) > 0.0
    # the reference is the initial policy, frozen; the caller's policy is not trained by the PRM
    ref_params = dict(prm.ref.named_parameters())
    for name, p in tiny_policy.model.named_parameters():
        assert (ref_params[name] == p).all() and not ref_params[name].requires_grad


def test_judge_scores_turns_with_the_prm(tiny_policy: Any) -> None:
    prm = make_judge("prm/prime", policy=tiny_policy)
    assert isinstance(prm, OnlineImplicitPRM)
    action = "<answer>42</answer>"
    turn = Turn(Task("t", "What is 6 times 7?", "42"), 0, action, parse_action(action), (), (), True)
    assert score_batch(prm, [turn])[0].score == 0.0  # before any update
    prm.optimizer.param_groups[0]["lr"] = 3e-3
    prm.update(_samples(prm, [(action, 1.0), ("<answer>41</answer>", 0.0)]))
    assert score_batch(prm, [turn])[0].score != 0.0


def test_prime_advantages_rloo() -> None:
    """Worked example of docs/judges.md: two samples, token rewards [0.1, 0.2] and [-0.1], outcomes 1, 0."""
    adv = prime_advantages([[0.1, 0.2], [-0.1]], [1.0, 0.0])
    # sample 0: baseline_p = -0.1, baseline_o = 0 -> returns (0.2+0.1)=0.3, (0.1+0.1)+0.3=0.5; +1
    assert adv[0] == pytest.approx([1.5, 1.3])
    # sample 1: baseline_p = 0.3, baseline_o = 1 -> (-0.1-0.3) = -0.4; -1
    assert adv[1] == pytest.approx([-1.4])
    with pytest.raises(ValueError):
        prime_advantages([[0.1]], [1.0])
