"""The clipped policy-gradient loss, KL and IS correction on hand-checked tensors."""

from __future__ import annotations

import math
from typing import Any

import torch

from prm_gym.training.losses import aggregate, kl_k3, policy_loss, token_logprobs, truncated_is_weights


def test_loss_is_masked_and_clipped_by_hand() -> None:
    lp = torch.log(torch.tensor([[1.5, 0.5, 1.0]]))
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token (a prompt token) must not count
    loss, stats = policy_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    # token 0: min(1.5*1, 1.2*1) = 1.2; token 1: min(0.5*-1, 0.8*-1) = -0.8
    assert math.isclose(float(loss), -(1.2 - 0.8) / 2, abs_tol=1e-6)
    assert stats["clip_frac"] == 1.0


def test_gradient_only_flows_through_sampled_tokens() -> None:
    lp = torch.zeros(1, 4, requires_grad=True)
    loss, _ = policy_loss(lp, lp.detach(), torch.ones(1, 4), torch.tensor([[0.0, 1.0, 1.0, 0.0]]))
    loss.backward()
    assert lp.grad is not None
    assert lp.grad.tolist() == [[0.0, -0.5, -0.5, 0.0]]


def test_aggregations_differ_as_documented() -> None:
    v = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert math.isclose(float(aggregate(v, m, "token-mean")), 7 / 4)
    assert math.isclose(float(aggregate(v, m, "seq-mean-token-mean")), (1 + 4) / 2)
    assert math.isclose(float(aggregate(v, m, "seq-mean-token-sum")), (3 + 4) / 2)


def test_kl_k3_zero_at_equal_and_positive_elsewhere() -> None:
    a = torch.tensor([-1.0, -2.0])
    assert torch.allclose(kl_k3(a, a), torch.zeros(2))
    assert bool((kl_k3(a, a + 0.3) > 0).all())
    loss0, _ = policy_loss(a[None], a[None], torch.zeros(1, 2), torch.ones(1, 2))
    loss1, st = policy_loss(
        a[None], a[None], torch.zeros(1, 2), torch.ones(1, 2), ref_logprobs=a[None] + 0.3, kl_coef=0.5
    )
    assert float(loss1) > float(loss0) and st["kl"] > 0


def test_truncated_is_weights_cap_and_value() -> None:
    w = truncated_is_weights(torch.tensor([0.0, 0.0]), torch.tensor([math.log(2.0), -5.0]), cap=2.0)
    assert torch.allclose(w, torch.tensor([0.5, 2.0]))


def test_token_logprobs_align_with_next_token() -> None:
    logits = torch.zeros(1, 3, 4)
    logits[0, 0, 2] = 10.0  # position 0 predicts token 2 at position 1
    lp = token_logprobs(logits, torch.tensor([[1, 2, 3]]))
    assert lp[0, 0] == 0.0
    assert float(lp[0, 1]) > -1e-3
    assert math.isclose(float(lp[0, 2]), math.log(0.25), abs_tol=1e-6)


def test_masked_logprobs_project_only_the_trained_positions(tiny_tokenizer: Any) -> None:
    from prm_gym.core.models import tiny_model
    from prm_gym.training.update import micro_logprobs

    model = tiny_model(len(tiny_tokenizer), seed=1)
    ids = torch.randint(3, len(tiny_tokenizer), (3, 12), generator=torch.Generator().manual_seed(0))
    attn = torch.ones_like(ids)
    mask = torch.zeros(3, 12)
    mask[0, 5:8], mask[1, 9:], mask[2, 6] = 1, 1, 1
    full = micro_logprobs(model, ids, attn, 0.7)
    seen: list[int] = []
    model.lm_head.register_forward_hook(lambda _m, _i, out: seen.append(out.shape[0]))
    part = micro_logprobs(model, ids, attn, 0.7, mask=mask)
    assert seen == [7]  # the 7 masked tokens are projected, not all 3 x 12 positions
    assert torch.allclose(part * mask, full * mask, atol=1e-5)
    assert part.requires_grad and torch.all(part[mask == 0] == 0)
