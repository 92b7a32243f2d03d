"""The clipped policy-gradient loss over tokens, the KL penalty and the truncated IS correction.

All tensors are ``(B, L)`` and aligned with the token ids: entry ``t`` is about the token at
position ``t`` (its log-prob given the tokens before it). ``mask`` is 1 only on tokens the
policy sampled, so prompt and tool-result tokens never contribute.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


def token_logprobs(logits: Tensor, input_ids: Tensor) -> Tensor:
    """``(B, L)`` log-prob of each token given the ones before it (position 0 gets 0).

    Args:
        logits: ``(B, L, V)`` model outputs for ``input_ids``.
        input_ids: ``(B, L)`` the token ids.
    """
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)


def truncated_is_weights(proximal_logprobs: Tensor, behaviour_logprobs: Tensor, cap: float) -> Tensor:
    """``min(pi_prox / pi_behaviour, cap)`` per token, detached.

    Corrects for rollouts sampled by an older (stale) policy or by a sampler whose numerics
    differ from the learner's; the cap bounds the variance (truncated importance sampling).
    """
    return torch.exp(proximal_logprobs.detach() - behaviour_logprobs).clamp(max=cap)


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """The k3 estimator of KL(pi || ref) per token: ``exp(r) - r - 1`` with ``r = ref - logp``."""
    r = ref_logprobs - logprobs
    return torch.exp(r) - r - 1


def aggregate(values: Tensor, mask: Tensor, how: Aggregation) -> Tensor:
    """Reduce ``(B, L)`` per-token values to a scalar over masked tokens.

    Args:
        values: per-token values.
        mask: 1 on the tokens that count.
        how: ``token-mean`` (all tokens of the batch weigh the same), ``seq-mean-token-mean``
            (each sequence weighs the same), ``seq-mean-token-sum``.
    """
    mask = mask.to(values.dtype)
    if how == "token-mean":
        return (values * mask).sum() / mask.sum().clamp(min=1)
    per_seq = (values * mask).sum(-1)
    if how == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1)
    has = (mask.sum(-1) > 0).to(values.dtype)
    return (per_seq * has).sum() / has.sum().clamp(min=1)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    is_weights: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    aggregation: Aggregation = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """The PPO/GRPO clipped surrogate over sampled tokens, negated for minimisation.

    ``loss_t = -w_t * min(ratio_t * A_t, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A_t)
    + kl_coef * KL_t`` with ``ratio_t = exp(logp_t - old_logp_t)``, reduced by ``aggregation``.

    Args:
        logprobs: current log-probs (with grad).
        old_logprobs: the proximal policy's log-probs (detached); with one update per batch
            pass ``logprobs.detach()``, which makes the ratio 1 with the right gradient.
        advantages: per-token advantages.
        mask: 1 on sampled tokens, 0 on prompt / tool-result / padding tokens.
        clip_low, clip_high: the asymmetric clip range.
        is_weights: truncated importance weights for stale rollouts (None: 1).
        ref_logprobs: log-probs under a frozen reference; used when ``kl_coef > 0``.
        kl_coef: weight of the k3 KL penalty.
        aggregation: see :func:`aggregate`.

    Returns:
        ``(loss, stats)`` with ``clip_frac``, ``kl`` and ``ratio_mean`` over masked tokens.
    """
    ratio = torch.exp(logprobs - old_logprobs.detach())
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    if is_weights is not None:
        surrogate = surrogate * is_weights.detach()
    per_token = -surrogate
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None and kl_coef > 0:
        kl = kl_k3(logprobs, ref_logprobs.detach())
        per_token = per_token + kl_coef * kl
    loss = aggregate(per_token, mask, aggregation)
    m = mask.to(ratio.dtype)
    denom = m.sum().clamp(min=1)
    with torch.no_grad():
        stats = {
            "clip_frac": float((((ratio - clipped).abs() > 1e-8).to(m.dtype) * m).sum() / denom),
            "kl": float((kl * m).sum() / denom),
            "ratio_mean": float((ratio * m).sum() / denom),
        }
    return loss, stats
