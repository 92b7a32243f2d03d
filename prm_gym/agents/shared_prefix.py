"""Attention over a prompt prefix that every row of a sampling batch shares, stored once.

make learn's few-shot evaluation gives 50 rows the same 453-id prompt prefix; a system prompt or a
GRPO group does the same at a smaller scale. A plain KV cache copies the prefix's keys and values
into every row and attention reads them once per row: at 50 rows of a 600-id context that read
is more than half of a SmolLM2-135M decode step on a CPU. Here the cache holds only each row's
own ids (its *suffix*), and the prefix's keys and values are kept once, ``(1, kv_heads, P, d)``
per layer, and passed to the forward as ``shared_prefix=``. Attention is then split in two:

* the prefix part, every row's queries against the one prefix, as a single attention call whose
  query length is rows x query heads (the prefix is read once for the whole batch);
* the suffix part, each row's queries against its own keys under the usual padding and causal
  mask.

Both are computed by torch's CPU flash kernel, which also returns each query's log-sum-exp of its
scores, and merged exactly: with ``l1, l2`` the two log-sum-exps and ``o1, o2`` the two outputs,
``o = (exp(l1 - m) o1 + exp(l2 - m) o2) / (exp(l1 - m) + exp(l2 - m))``, ``m = max(l1, l2)``, which
is softmax attention over the concatenated keys (the numbers differ from one call over all keys
only by rounding). Calls without ``shared_prefix`` (the learner, any other caller) go to
transformers' SDPA attention unchanged.
"""

from __future__ import annotations

from typing import Any

NAME = "prm_shared_prefix"
"""The attention implementation's name in transformers' registries."""


def enable(model: Any) -> bool:
    """Switch ``model`` (a transformers model using SDPA attention on a CPU) to this attention, which
    behaves as SDPA unless a forward passes ``shared_prefix``; True when it is on. Models on another
    device or with another attention implementation are left alone (False): the sampler then
    copies the prefix into every row, as before."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        return False
    current = getattr(config, "_attn_implementation", None)
    if current == NAME:
        return True
    params = next(iter(model.parameters()), None)
    if current != "sdpa" or params is None or params.device.type != "cpu":
        return False
    _register()
    model.set_attn_implementation(NAME)
    return bool(config._attn_implementation == NAME)


def _register() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    shared_prefix: Any = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function interface: ``query`` ``(B, H, T, d)``, ``key``/``value``
    ``(B, KV, S, d)`` (the rows' own ids), ``attention_mask`` a boolean ``(B, 1, T, S)`` mask or
    None (causal); ``shared_prefix`` a (keys, values) pair ``(1, KV, P, d)`` per layer, indexed by
    ``module.layer_idx``. Returns ``((B, T, H, d), None)``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if shared_prefix is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if dropout or any(kwargs.get(k) is not None for k in ("softcap", "position_bias", "sliding_window")):
        raise ValueError("shared-prefix attention supports plain causal attention only")
    prefix_k, prefix_v = shared_prefix[module.layer_idx]
    return split_attention(query, key, value, attention_mask, prefix_k, prefix_v, scaling), None


def split_attention(
    query: Any, key: Any, value: Any, mask: Any, prefix_k: Any, prefix_v: Any, scale: float | None
) -> Any:
    """Softmax attention of ``query`` over ``prefix_k`` (seen by every row and query) followed by
    ``key`` (under ``mask``), without copying the prefix per row: ``(B, T, H, d)``."""
    import torch

    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    b, h, t, d = query.shape
    kv = key.shape[1]
    g = h // kv
    if scale is None:
        scale = d**-0.5
    # Query heads kv*g .. kv*g+g-1 read key head kv (grouped-query attention): pack them as rows.
    q = query.reshape(b, kv, g * t, d)
    o1, l1 = flash(q.transpose(0, 1).reshape(1, kv, b * g * t, d), prefix_k, prefix_v, scale=scale)[:2]
    o1 = o1.reshape(kv, b, g * t, d).transpose(0, 1)
    l1 = l1.reshape(kv, b, g * t).transpose(0, 1)
    allowed = _allowed(mask, b, t, key.shape[2], query.device)
    bias = torch.zeros(allowed.shape, dtype=query.dtype, device=query.device).masked_fill_(~allowed, float("-inf"))
    bias = bias[:, :, None].expand(b, 1, g, t, key.shape[2]).reshape(b, 1, g * t, key.shape[2])
    o2, l2 = flash(q, key, value, attn_mask=bias, scale=scale)[:2]
    # A query that sees none of the suffix (a padding position) takes the prefix part alone: the
    # kernel reports such a row as log-sum-exp 0, so it is found from the mask.
    seen = allowed.any(-1)[:, :, None].expand(b, 1, g, t).reshape(b, 1, g * t)
    m = torch.maximum(l1, l2)
    w1, w2 = (l1 - m).exp_(), torch.where(seen, (l2 - m).exp_(), 0.0)
    o2 = torch.where(seen[..., None], o2, 0.0)
    out = (o1.float() * w1[..., None] + o2.float() * w2[..., None]) / (w1 + w2)[..., None]
    return out.to(query.dtype).reshape(b, h, t, d).transpose(1, 2).contiguous()


def _allowed(mask: Any, b: int, t: int, s: int, device: Any) -> Any:
    """The boolean ``(B, 1, T, S)`` mask of suffix keys each query may read (None: causal, aligned
    so that the last query sees every key)."""
    import torch

    if mask is not None:
        if mask.dtype != torch.bool:
            mask = mask == 0  # an additive float mask: 0 where allowed
        return mask.expand(b, 1, t, s)
    rows = torch.arange(t, device=device)[:, None] + (s - t)
    return (torch.arange(s, device=device)[None, :] <= rows).expand(b, 1, t, s)
