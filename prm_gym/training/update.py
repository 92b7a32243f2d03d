"""The learner's update: clipped policy-gradient steps on a batch, micro-batched, with the
truncated importance-sampling correction and an optional KL to a reference."""

from __future__ import annotations

from typing import Any

import torch

from prm_gym.core.hf import forward_takes
from prm_gym.training.batch import Batch
from prm_gym.training.config import LossConfig
from prm_gym.training.ddp import rank_chunks, reduce_stats
from prm_gym.training.fsdp import scalar
from prm_gym.training.losses import policy_loss, token_logprobs, truncated_is_weights


def micro_logprobs(
    model: Any,
    ids: torch.Tensor,
    attn: torch.Tensor,
    temperature: float,
    autocast: bool = False,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(B, L)`` log-prob of each token of ``ids`` given the ones before it (see
    :func:`token_logprobs`), under bfloat16 autocast with ``autocast``.

    With ``mask`` (1 on the tokens that count) only the positions some row trains on are
    projected onto the vocabulary (``logits_to_keep``); positions no row trains on are 0. The prompt and
    tool results of a multi-turn episode are most of its tokens, so this saves most of the
    ``(B, L, vocab)`` logits' time and memory.
    """
    keep = None
    if mask is not None and forward_takes(model, "logits_to_keep"):
        keep = torch.nonzero(mask[:, 1:].any(0)).squeeze(-1)  # position t predicts token t + 1
    extra = {} if keep is None else {"logits_to_keep": keep}
    with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids, attention_mask=attn, **extra).logits
    if temperature > 0:
        logits = logits / temperature
    if keep is None:
        return token_logprobs(logits, ids)
    picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, keep + 1, None]).squeeze(-1)
    return torch.zeros(ids.shape, dtype=picked.dtype, device=ids.device).index_copy(1, keep + 1, picked)


def learner_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: LossConfig,
    *,
    ref: Any = None,
    temperature: float = 1.0,
    autocast: bool = False,
) -> dict[str, float]:
    """``cfg.updates_per_batch`` clipped policy-gradient steps on ``batch`` (micro-batched);
    ``autocast``: forward and backward under bfloat16 autocast (``--precision bf16``)."""
    rows = [i for i in range(batch.input_ids.shape[0]) if batch.loss_mask[i].sum() > 0]
    if not rows:
        return {"loss": 0.0, "trained_rows": 0.0}
    model.train()
    chunks = rank_chunks(model, rows, cfg.micro_batch_size)  # (this rank's rows, loss weight); all, 1 in one process
    total_tok = float(batch.loss_mask[rows].sum())
    proximal: dict[int, torch.Tensor] = {}
    if cfg.updates_per_batch > 1:
        with torch.no_grad():
            for c, _ in chunks:
                ids, attn, width = _slice(batch, c)
                mask = batch.loss_mask[c, :width]
                proximal[c[0]] = micro_logprobs(model, ids, attn, temperature, autocast, mask)
    stats: dict[str, float] = {}
    for _ in range(cfg.updates_per_batch):
        optimizer.zero_grad(set_to_none=True)
        stats = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "is_weight": 0.0}
        for c, weight in chunks:
            ids, attn, width = _slice(batch, c)
            mask = batch.loss_mask[c, :width]
            lp = micro_logprobs(model, ids, attn, temperature, autocast, mask)
            old = proximal.get(c[0], lp.detach())[:, :width]
            isw = truncated_is_weights(old, batch.behaviour_logprobs[c, :width], cfg.is_cap)
            ref_lp = None
            if ref is not None:
                with torch.no_grad():
                    ref_lp = micro_logprobs(ref, ids, attn, temperature, autocast, mask)
            loss, st = policy_loss(
                lp,
                old,
                batch.advantages[c, :width],
                mask,
                clip_low=cfg.clip_low,
                clip_high=cfg.clip_high,
                is_weights=isw,
                ref_logprobs=ref_lp,
                kl_coef=cfg.kl_coef,
                aggregation=cfg.aggregation,
            )
            share = (float(mask.sum()) / total_tok if cfg.aggregation == "token-mean" else len(c) / len(rows)) * weight
            (loss * share).backward()
            stats["loss"] += float(loss.detach()) * share
            for k in ("clip_frac", "kl"):
                stats[k] += st[k] * share
            stats["is_weight"] += float((isw * mask).sum()) / total_tok * weight
        stats = reduce_stats(model, stats)
        if cfg.max_grad_norm > 0:
            stats["grad_norm"] = scalar(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
        optimizer.step()
    model.eval()
    stats["trained_rows"] = float(len(rows))
    return stats


def _slice(batch: Batch, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    width = int(batch.attention_mask[rows].sum(-1).max())
    return batch.input_ids[rows, :width], batch.attention_mask[rows, :width], width
