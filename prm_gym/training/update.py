"""The learner's update: clipped policy-gradient steps on a batch, micro-batched, with the
truncated importance-sampling correction and an optional KL to a reference."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from prm_gym.agents.hf import forward_takes
from prm_gym.training.batch import Batch
from prm_gym.training.config import LossConfig
from prm_gym.training.ddp import rank_chunks, reduce_stats
from prm_gym.training.fsdp import is_sharded, scalar
from prm_gym.training.losses import policy_loss, token_logprobs, truncated_is_weights


def micro_logprobs(
    model: Any,
    ids: torch.Tensor,
    attn: torch.Tensor,
    temperature: float,
    autocast: bool = False,
    mask: torch.Tensor | None = None,
    chunk_tokens: int | None = None,
) -> torch.Tensor:
    """``(B, L)`` log-prob of each token of ``ids`` given the ones before it (see
    :func:`token_logprobs`), under bfloat16 autocast with ``autocast``.

    With ``mask`` (1 on the tokens that count) only the tokens some row trains on are projected onto
    the vocabulary; every other entry is 0. The prompt and tool results of a multi-turn episode are
    most of its tokens, so this saves most of the ``(B, L, vocab)`` logits' time and memory.

    On a plain transformers model the projection runs :func:`chunked_logprobs`: the decoder's
    hidden states of the trained tokens go through the output layer ``chunk_tokens`` rows at a time
    (default: :func:`default_chunk`), recomputed in the backward pass, so neither pass holds more
    than one chunk's logits (the values are the same: the same operations on fewer rows). A model
    wrapped for DDP/FSDP, or one whose head rescales its logits, projects the union of the trained
    positions at once (``logits_to_keep``).
    """
    head = _output_layer(model) if mask is not None else None
    if head is not None and mask is not None:
        rows, cols = torch.nonzero(mask[:, 1:] > 0, as_tuple=True)  # position t predicts token t + 1
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=autocast):
            hidden = model.get_decoder()(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
            picked = chunked_logprobs(hidden[rows, cols], head, ids[rows, cols + 1], temperature, chunk_tokens)
        out = torch.zeros(ids.shape, dtype=picked.dtype, device=ids.device)
        return out.index_put((rows, cols + 1), picked)
    keep = None
    if mask is not None and forward_takes(model, "logits_to_keep"):
        keep = torch.nonzero(mask[:, 1:].any(0)).squeeze(-1)
    extra: dict[str, Any] = {"use_cache": False} if forward_takes(model, "use_cache") else {}
    if keep is not None:
        extra["logits_to_keep"] = keep
    with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids, attention_mask=attn, **extra).logits
    if temperature > 0:
        logits = logits / temperature
    if keep is None:
        return token_logprobs(logits, ids)
    picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, keep + 1, None]).squeeze(-1)
    return torch.zeros(ids.shape, dtype=picked.dtype, device=ids.device).index_copy(1, keep + 1, picked)


def default_chunk(vocab: int) -> int:
    """Rows projected at once by :func:`chunked_logprobs`: about 16M logits (64 MB in fp32)."""
    return max(1, (1 << 24) // max(vocab, 1))


def chunked_logprobs(
    hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor, temperature: float, chunk: int | None = None
) -> torch.Tensor:
    """``(N,)`` log-prob of ``targets`` (``(N,)`` ids) under ``log_softmax(head(hidden) / temperature)``
    (``temperature`` 0: 1), computed ``chunk`` rows of ``hidden`` (``(N, d)``) at a time.

    With autograd each chunk is recomputed in the backward pass (activation checkpointing), so
    neither pass ever holds more than one chunk's ``(chunk, vocab)`` logits, and no fp32 copy of
    them outlives its chunk. Ops and dtypes are :func:`token_logprobs`'s: the logits in the head's
    (or autocast's) dtype, divided by the temperature, then ``log_softmax`` in fp32.
    """
    vocab = int(getattr(head, "out_features", 0) or head.weight.shape[0])  # type: ignore[index]
    size = chunk or default_chunk(vocab)
    parts = []
    for lo in range(0, hidden.shape[0], size):
        h, t = hidden[lo : lo + size], targets[lo : lo + size]
        if torch.is_grad_enabled() and (h.requires_grad or any(p.requires_grad for p in head.parameters())):
            parts.append(checkpoint(_picked_logprobs, h, head, t, temperature, use_reentrant=False))
        else:
            parts.append(_picked_logprobs(h, head, t, temperature))
    if not parts:
        return hidden.new_zeros(0, dtype=torch.float32)
    return torch.cat(parts)


def _picked_logprobs(h: torch.Tensor, head: torch.nn.Module, t: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = head(h)
    if temperature > 0:
        logits = logits / temperature
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, t[:, None]).squeeze(-1)


_RESCALED = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def _output_layer(model: Any) -> torch.nn.Module | None:
    """The output layer of a plain transformers causal LM whose logits are ``head(decoder(...))``
    (:func:`chunked_logprobs` applies to it), else None (wrapped for DDP/FSDP, or a head that
    rescales its logits)."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel) or is_sharded(model):
        return None
    config = getattr(model, "config", None)
    if any(getattr(config, name, None) not in (None, 1, 1.0) for name in _RESCALED):
        return None
    head = model.get_output_embeddings()
    decoder = model.get_decoder()
    if not isinstance(head, torch.nn.Linear) or decoder is None or decoder is model:
        return None
    return head


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
    ``autocast``: forward and backward under bfloat16 autocast (``--precision bf16``);
    ``cfg.activation_checkpointing``: decoder layers recompute their activations in the backward."""
    rows = [i for i in range(batch.input_ids.shape[0]) if batch.loss_mask[i].sum() > 0]
    if not rows:
        return {"loss": 0.0, "trained_rows": 0.0}
    model.train()
    try:
        with recomputing(model, cfg.activation_checkpointing):
            return _steps(model, optimizer, batch, cfg, rows, ref, temperature, autocast)
    finally:
        model.eval()


@contextmanager
def recomputing(model: Any, on: bool) -> Iterator[None]:
    """Inside the block, with ``on``, the decoder layers of ``model`` (in train mode) keep only their
    inputs and recompute their activations in the backward pass (transformers' activation
    checkpointing, ``--loss.activation-checkpointing``): the same gradients, a third forward pass
    more, and activation memory of one layer instead of all. A model that does not support it is
    left as it is."""
    on = on and bool(getattr(model, "supports_gradient_checkpointing", False))
    if on:
        _checkpointing(model, True)
    try:
        yield
    finally:
        if on:
            _checkpointing(model, False)


def _checkpointing(model: Any, on: bool) -> None:
    """Turn transformers' per-layer activation checkpointing on or off (its name since v5, or before)."""
    if hasattr(model, "activation_checkpointing_enable"):
        if on:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.activation_checkpointing_disable()
    elif on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()


def _steps(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: LossConfig,
    rows: list[int],
    ref: Any,
    temperature: float,
    autocast: bool,
) -> dict[str, float]:
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
    stats["trained_rows"] = float(len(rows))
    return stats


def _slice(batch: Batch, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    width = int(batch.attention_mask[rows].sum(-1).max())
    return batch.input_ids[rows, :width], batch.attention_mask[rows, :width], width
