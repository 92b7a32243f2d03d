"""HFPolicy: sampling from a transformers causal LM with exact behaviour log-probs.

The sampler is a short batched loop over the KV cache (left padding, explicit position ids) so
that the log-probability of every sampled id under the sampling distribution is known exactly,
stop strings end a row as soon as they appear, and nothing is re-tokenised.

Two things keep it fast on a CPU: rows with the same prompt (a GRPO group's first turn) share one
prefill, whose cache is then copied per row, and the prefill computes logits for the last
position only. With ``sample_dtype="bfloat16"`` it samples from a bfloat16 copy of the weights
(refreshed whenever :attr:`HFPolicy.version` moves), about 3x faster than fp32 on CPUs with
AVX512-BF16 or AMX; the behaviour log-probs are then the bfloat16 sampler's, which the learner's
truncated importance weights correct for.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Sequence
from typing import Any

from prm_gym.core.models import load_hf
from prm_gym.core.policy import Generation, SamplingParams


class HFPolicy:
    """A transformers causal LM as a :class:`prm_gym.core.policy.Policy`.

    Args:
        model: a causal LM (``model.train()`` / ``eval()`` is left to the caller).
        tokenizer: its tokenizer (with a chat template).
        version: the weights' version; the trainer increments it after every update, which is
            what tells a ``sample_dtype`` copy to refresh.
        seed: seed of the sampler's own RNG (global RNGs are never touched).
        sample_dtype: sample from a copy of the weights in this torch dtype (``"bfloat16"``);
            None samples from ``model`` itself.
    """

    def __init__(self, model: Any, tokenizer: Any, version: int = 0, seed: int = 0, sample_dtype: str | None = None):
        import torch

        self.model = model
        self.tokenizer = tokenizer
        self.version = version
        self.sample_dtype = sample_dtype
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(seed)
        self._copy: Any = None
        self._copy_version = -1

    def reseed(self, seed: int) -> None:
        """Restart the sampler's RNG from ``seed``."""
        self.generator.manual_seed(seed)

    @classmethod
    def from_id(cls, policy_id: str, seed: int = 0, sample_dtype: str | None = None) -> HFPolicy:
        model, tok = load_hf(policy_id, seed)
        return cls(model, tok, seed=seed, sample_dtype=sample_dtype)

    def sampler_model(self) -> Any:
        """The model that samples: ``model``, or its ``sample_dtype`` copy as of :attr:`version`."""
        import torch

        dtype = getattr(torch, self.sample_dtype) if self.sample_dtype else None
        if dtype is None or self.model.dtype == dtype:
            return self.model
        if self._copy is None:
            self._copy = copy.deepcopy(self.model).to(dtype).eval()
            for (_, fast), (_, master) in zip(self._copy.named_buffers(), self.model.named_buffers(), strict=True):
                fast.data = master.data.clone()  # rotary frequencies and the like keep their precision
        elif self._copy_version != self.version:
            with torch.no_grad():
                for fast, master in zip(self._copy.parameters(), self.model.parameters(), strict=True):
                    fast.copy_(master)
        self._copy_version = self.version
        return self._copy

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        import torch

        if not prompts:
            return []
        with torch.no_grad():
            rows, lps, finish = self._sample(prompts, params)
        return [
            Generation(r, lp, self.tokenizer.decode(r, skip_special_tokens=True), f)
            for r, lp, f in zip(rows, lps, finish, strict=True)
        ]

    def _sample(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]], list[str]]:
        import torch

        model = self.sampler_model()
        device = next(model.parameters()).device
        pad = self.tokenizer.pad_token_id or 0
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        gen = self.generator
        n = len(prompts)
        rows: list[list[int]] = [[] for _ in range(n)]
        lps: list[list[float]] = [[] for _ in range(n)]
        finish = ["length"] * n
        done = [False] * n
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        past, logits = _prefill(model, ids, mask, positions, [tuple(p) for p in prompts])
        last_pos = positions[:, -1]
        stop_window = max((len(s) for s in params.stop), default=0) + 2
        for _ in range(params.max_new_tokens):
            logp = torch.log_softmax(logits.float() / max(params.temperature, 1e-6), dim=-1)
            if params.temperature == 0:
                tok = logp.argmax(-1)
            else:
                tok = torch.multinomial(logp.exp().cpu(), 1, generator=gen).squeeze(-1).to(device)
            chosen = logp.gather(-1, tok[:, None]).squeeze(-1).tolist()
            for b, (t, lp) in enumerate(zip(tok.tolist(), chosen, strict=True)):
                if done[b]:
                    continue
                rows[b].append(t)
                lps[b].append(lp)
                if t == self.tokenizer.eos_token_id or self._hit_stop(rows[b], params.stop, stop_window):
                    done[b], finish[b] = True, "stop"
            if all(done):
                break
            mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], dim=-1)
            last_pos = last_pos + 1
            step = {_cache_arg(model): past}
            out = model(
                input_ids=tok[:, None], attention_mask=mask, position_ids=last_pos[:, None], use_cache=True, **step
            )
            past, logits = _cache_of(out), out.logits[:, -1, :]
        return rows, lps, finish

    def _hit_stop(self, row: list[int], stop: Sequence[str], window: int) -> bool:
        if not stop:
            return False
        tail = self.tokenizer.decode(row[-window:])
        return any(s in tail for s in stop)


def _prefill(model: Any, ids: Any, mask: Any, positions: Any, keys: list[tuple[int, ...]]) -> tuple[Any, Any]:
    """The KV cache and last-position logits of the prompts; equal prompts are computed once."""
    import torch

    first: dict[tuple[int, ...], int] = {}
    index: list[int] = []
    rows: list[int] = []
    for b, key in enumerate(keys):
        if key not in first:
            first[key] = len(rows)
            rows.append(b)
        index.append(first[key])
    extra = {"logits_to_keep": 1} if forward_takes(model, "logits_to_keep") else {}
    pick = torch.tensor(rows, device=ids.device)
    out = model(input_ids=ids[pick], attention_mask=mask[pick], position_ids=positions[pick], use_cache=True, **extra)
    past, logits = _cache_of(out), out.logits[:, -1, :]
    if len(rows) < len(keys):
        expand = torch.tensor(index, device=ids.device)
        past.reorder_cache(expand)  # a Cache object (transformers >= 4.36), copies each layer's rows
        logits = logits[expand]
    return past, logits


def _cache_arg(model: Any) -> str:
    """The forward keyword that takes the KV cache: ``cache`` in recent transformers (which warns
    on the old name), ``past_key_values`` before."""
    cls: Any = type(model)
    return _cache_arg_of(cls)


def _cache_arg_of(cls: Any) -> str:
    return "cache" if _takes(cls, "cache") else "past_key_values"


def forward_takes(model: Any, name: str) -> bool:
    """Whether ``model``'s forward has a keyword ``name`` (e.g. ``logits_to_keep``)."""
    cls: Any = type(model)
    return _takes(cls, name)


@functools.cache
def _takes(cls: Any, name: str) -> bool:
    return name in inspect.signature(cls.forward).parameters


def _cache_of(out: Any) -> Any:
    """The KV cache of a forward's output, under whichever name this transformers uses."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
