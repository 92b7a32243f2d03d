"""HFPolicy: sampling from a transformers causal LM with exact behaviour log-probs.

The sampler is a short batched loop over the KV cache (left padding, explicit position ids) so
that the log-probability of every sampled id under the sampling distribution is known exactly,
stop strings end a row as soon as they appear, and nothing is re-tokenised.

Three things keep it fast on a CPU. Rows with the same prompt (a GRPO group's first turn) share one
prefill, whose cache is then copied per row, and the prefill computes logits for the last position
only. Distinct prompts share one prefill of their common leading ids (the system prompt). And the
KV cache of each sequence of the last call (prompt + sampled ids) is kept until the next call, so
the next turn of an episode, whose prompt extends it, prefills only the tool result and the new
generation prompt (the keys are exact token ids, and a weights update drops them). A prefix that
every row of a call starts with (a few-shot prompt, a system prompt) is held once rather than
copied into every row, and attention reads it once for the batch
(:mod:`prm_gym.agents.shared_prefix`; CPU models with SDPA attention).
On a GPU the token loop stays on the device: every tensor is made where the model is, ids are
drawn by a generator on the device (seeded, reproducible), sampled ids and log-probs go into
preallocated device buffers, and the host looks at them once every :data:`SYNC_EVERY` steps (ends
of turn, stop strings, finished rows leaving the batch), not at every token; the RNG is rewound past
the steps after the last row stopped, so the draws are those of a look at every step.
With ``sample_dtype="bfloat16"`` it samples from a bfloat16 copy of the weights
(refreshed whenever :attr:`HFPolicy.version` moves), about 3x faster than fp32 on CPUs with
AVX512-BF16 or AMX; the behaviour log-probs are then the bfloat16 sampler's, which the learner's
truncated importance weights correct for.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

from prm_gym.agents import kv_cache, shared_prefix
from prm_gym.agents.kv_cache import plain_layers
from prm_gym.agents.turn_ends import TurnEnds
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
        reuse_prefixes: keep the KV cache of the last call's sequences, so the next turn of an
            episode prefills only its new ids, and prefill the common leading ids (a system
            prompt) of distinct prompts once; False recomputes every prompt whole.
        sync_every: look at the sampled ids (ends of turn, finished rows) every this many steps;
            None: every step on a CPU, every :data:`SYNC_EVERY` on a GPU. The same draws either way;
            only where finished rows leave the batch at other steps can float rounding differ.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        version: int = 0,
        seed: int = 0,
        sample_dtype: str | None = None,
        reuse_prefixes: bool = True,
        sync_every: int | None = None,
    ):
        import torch

        self.model = model
        self.tokenizer = tokenizer
        self.version = version
        self.sample_dtype = sample_dtype
        self.seed = seed
        self.generator = torch.Generator(device="cpu")  # moves to the model's device at its first call there
        self.generator.manual_seed(seed)
        self.sync_every = sync_every
        self._copy: Any = None
        self._copy_version = -1
        self.reuse_prefixes = reuse_prefixes
        self._prefixes: _Prefixes | None = None

    def forget(self) -> None:
        """Drop what the sampler keeps between calls, so that the learner step that follows has the
        memory: the KV caches kept from the last call (the next call prefills its prompts whole) and
        the weights of the ``sample_dtype`` copy (refilled from ``model`` by the next call, the same
        numbers). A rollout worker calls it when a group's episodes are over."""
        self._prefixes = None
        if self._copy is not None:
            for p in self._copy.parameters():
                p.data = p.data.new_empty(0)
            self._copy_version = -1

    def reseed(self, seed: int) -> None:
        """Restart the sampler's RNG from ``seed``."""
        self.seed = seed
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
                    if fast.shape == master.shape:
                        fast.copy_(master)
                    else:  # emptied by forget()
                        fast.data = master.detach().to(dtype=fast.dtype, copy=True)  # never the master's storage
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

    def _generator_on(self, device: Any) -> Any:
        """The sampler's RNG on ``device`` (a CUDA generator draws on the GPU, with no copy of the
        probabilities to the host); made from :attr:`seed` the first time the model is there."""
        import torch

        if self.generator.device != device:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(self.seed)
        return self.generator

    def _sample(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> tuple[list[list[int]], list[list[float]], list[str]]:
        import torch

        model = self.sampler_model()
        device = next(model.parameters()).device
        keys = [tuple(p) for p in prompts]
        store = self._prefixes
        if store is not None and store.owner != (id(model), self.version):
            store = None
        share = SHARED_PREFIX_MIN if self.reuse_prefixes else None
        pad = self.tokenizer.pad_token_id or 0
        split = self.reuse_prefixes and _splits(model)
        past, logits, mask, prefix = _prefill(model, keys, pad, device, store, share, params.max_new_tokens, split)
        self._prefixes = store = None  # copied into the batch's cache: the kept ones leave memory now
        gen = self._generator_on(device)
        n, budget = len(prompts), params.max_new_tokens
        sampled = torch.zeros((n, budget), dtype=torch.long, device=device)
        chosen = torch.zeros((n, budget), dtype=torch.float32, device=device)
        rows = TurnEnds(n, self.tokenizer, params.stop)
        last_pos = mask.sum(-1) - 1 + (len(prefix.ids) if prefix is not None else 0)
        prompt_cols = [[j for j, v in enumerate(r) if v] for r in mask.tolist()]  # each row's real prompt columns
        width = mask.shape[1]
        active = list(range(n))  # the rows the cache holds, in its batch order
        index = torch.arange(n, device=device)  # the same, on the device
        kept: dict[tuple[int, ...], list[tuple[Any, Any]]] = {}  # caches of rows dropped from the batch
        sync = self.sync_every or (1 if device.type == "cpu" else SYNC_EVERY)
        states: dict[int, Any] = {}
        steps = 0
        for step in range(budget):
            if len(active) < n:  # every row draws from the RNG each step, live or not, so dropping rows
                full = logits.new_zeros((n, logits.shape[-1]))  # changes nobody's draws
                logits = full.index_copy(0, index, logits)
            logp = torch.log_softmax(logits.float() / max(params.temperature, 1e-6), dim=-1)
            if params.temperature == 0:
                tok = logp.argmax(-1)
            else:
                tok = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(-1)
            sampled[:, step] = tok
            chosen[:, step] = logp.gather(-1, tok[:, None]).squeeze(-1)
            steps = step + 1
            if sync > 1:  # the RNG as of each step since the last look (host values: no sync)
                states[steps] = gen.get_state()
            if steps % sync == 0 or steps == budget:  # the one host sync of these steps: the new ids
                rows.extend(sampled[:, rows.seen : steps].tolist(), self.tokenizer.eos_token_id)
                if rows.all_done() or steps == budget:
                    if sync > 1:  # the draws past the step the last row stopped at never happened
                        gen.set_state(states[max(len(r) for r in rows.ids)])
                    break  # the last sampled ids need no forward
                states.clear()
                sampling = [b for b, r in enumerate(active) if rows.end[r] is None]
                if len(sampling) <= len(active) * COMPACT_AT:  # the finished rows leave the batch
                    if self.reuse_prefixes:
                        gone = [p for p, r in enumerate(active) if rows.end[r] is not None]
                        _keep_rows(kept, past, prompt_cols, width, keys, rows.ids, active, gone)
                    keep = torch.tensor(sampling, device=device)
                    past.reorder_cache(keep)
                    active, index = [active[b] for b in sampling], index[keep]
                    mask, last_pos, prompt_cols = mask[keep], last_pos[keep], [prompt_cols[b] for b in sampling]
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], dim=-1)
            last_pos = last_pos + 1
            step_arg = {_cache_arg(model): past}
            if prefix is not None:
                step_arg["shared_prefix"] = prefix.layers
            out = model(
                input_ids=tok[index][:, None],
                attention_mask=mask,
                position_ids=last_pos[:, None],
                use_cache=True,
                **step_arg,
            )
            past, logits = _cache_of(out), out.logits[:, -1, :]
        self._prefixes = None  # the last call's caches are consumed (or stale) either way
        if self.reuse_prefixes:
            owner = (id(model), self.version)
            self._prefixes = _remember(past, prompt_cols, width, keys, rows.ids, active, kept, owner, prefix)
        lps = chosen[:, :steps].tolist()
        return rows.ids, [lp[: len(r)] for lp, r in zip(lps, rows.ids, strict=True)], rows.finish


SYNC_EVERY = 8
"""On a GPU the token loop looks at its sampled ids (end-of-turn token, stop strings, finished rows)
every this many steps, so the host waits for the GPU once per that many tokens, not at each; a row
that stopped in between is cut at its stop, and its extra ids, sampled and computed, are dropped.
On a CPU there is no queue to wait for, and it looks at every step (no wasted forwards)."""


SHARED_PREFIX_MIN = 16
"""Distinct prompts that share at least this many leading ids (a system prompt) prefill them once."""


class _Shared:
    """A prompt prefix every row of a batch starts with, its keys and values held once per layer
    (``(1, kv_heads, len(ids), d)``): the rows' caches hold only the ids after it
    (:mod:`prm_gym.agents.shared_prefix`)."""

    def __init__(self, ids: tuple[int, ...], layers: list[tuple[Any, Any]]):
        self.ids = ids
        self.layers = layers


def _splits(model: Any) -> bool:
    """Whether ``model`` can sample with a :class:`_Shared` prefix: shared-prefix attention is on and
    its cache layers are plain full-attention ones."""
    return shared_prefix.enable(model) and kv_cache.new_cache(model, 0) is not None


class _Prefixes:
    """The KV caches of the last call's sequences (prompt + sampled ids but the last), per row, so
    that the next turn of an episode, whose prompt extends them, prefills only its new ids.

    ``owner`` is ``(id(model), version)``: another model or a weights update invalidates them.
    With ``prefix``, every sequence starts with ``prefix.ids`` and its entry holds only the ids
    after them.
    """

    def __init__(
        self,
        owner: tuple[int, int],
        entries: dict[tuple[int, ...], list[tuple[Any, Any]]],
        prefix: _Shared | None = None,
    ):
        self.owner = owner
        self.entries = entries
        self.prefix = prefix
        self.lengths = sorted({len(k) for k in entries}, reverse=True)

    def longest(self, key: tuple[int, ...]) -> tuple[int, list[tuple[Any, Any]]] | None:
        """The longest stored sequence that is a proper prefix of ``key``: ``(length, layers)``."""
        for n in self.lengths:
            if n < len(key) and (hit := self.entries.get(key[:n])) is not None:
                return n, hit
        return None


COMPACT_AT = 0.5
"""A sampling call drops its finished rows from the batch once at most this share of the rows in
the batch is still sampling (so a turn whose rows stop at different lengths stops computing the
stopped ones, at most ``log2(rows)`` re-packings of the cache a call)."""


def _keep_rows(
    entries: dict[tuple[int, ...], list[tuple[Any, Any]]],
    past: Any,
    prompt_cols: list[list[int]],
    width: int,
    keys: list[tuple[int, ...]],
    rows: list[list[int]],
    active: list[int],
    positions: Sequence[int],
) -> None:
    """Add to ``entries`` the cache of each batch row at ``positions`` over its real ids (prompt +
    sampled ids but the last), without padding: ``active[p]`` is the row's index in ``keys``,
    ``prompt_cols[p]`` its prompt's columns among the prefill's ``width``."""
    import torch

    layers = plain_layers(past)
    if layers is None:
        return
    device = layers[0].keys.device
    for p in positions:
        b = active[p]
        key, row = keys[b], rows[b]
        if len(row) < 2:
            continue
        seq = key + tuple(row[:-1])
        if seq in entries:
            continue
        cols = torch.tensor(prompt_cols[p] + list(range(width, width + len(row) - 1)), device=device)
        entries[seq] = [(x.keys[p : p + 1, :, cols], x.values[p : p + 1, :, cols]) for x in layers]


def _remember(
    past: Any,
    prompt_cols: list[list[int]],
    width: int,
    keys: list[tuple[int, ...]],
    rows: list[list[int]],
    active: list[int],
    kept: dict[tuple[int, ...], list[tuple[Any, Any]]],
    owner: tuple[int, int],
    prefix: _Shared | None = None,
) -> _Prefixes | None:
    """Each row's cache over its real ids (after ``prefix``, if any): the rows still in the batch
    (``active``) added to the ones ``kept`` when they left it."""
    if plain_layers(past) is None:
        return None
    _keep_rows(kept, past, prompt_cols, width, keys, rows, active, range(len(active)))
    return _Prefixes(owner, kept, prefix)


def _common_prefix(keys: Sequence[tuple[int, ...]]) -> int:
    """The number of leading ids all ``keys`` share."""
    first, n = keys[0], min(len(k) for k in keys)
    for k in keys[1:]:
        i = 0
        while i < n and k[i] == first[i]:
            i += 1
        n = i
    return n


def _prefill(
    model: Any,
    keys: list[tuple[int, ...]],
    pad: int,
    device: Any,
    store: _Prefixes | None = None,
    share: int | None = SHARED_PREFIX_MIN,
    room: int = 0,
    split: bool = False,
) -> tuple[Any, Any, Any, _Shared | None]:
    """The KV cache, last-position logits, attention mask and shared prefix of the prompts ``keys``.

    Equal prompts are computed once. A prompt that extends a sequence of the previous call
    (``store``: the episode's last turn) reuses that sequence's cache; the other distinct prompts
    share one prefill of their common leading ids (the system prompt) when there are at least
    ``share`` (None: never). Only the remaining ids of each prompt are computed, right-aligned
    after its cached part, with the gap masked and explicit position ids, and only the last
    position is projected onto the vocabulary. The cache keeps ``room`` spare columns per layer for
    the ids to be sampled (:mod:`prm_gym.agents.kv_cache`).

    With ``split`` (the model has shared-prefix attention), a prefix that every prompt starts with
    (the common leading ids of a call's fresh prompts, or the previous call's prefix, which every
    prompt extends) is not copied into the rows: the cache and the mask cover the ids after it,
    and the prefix comes back as a :class:`_Shared` to pass to every forward (None otherwise).
    """
    import torch

    first: dict[tuple[int, ...], int] = {}
    index: list[int] = []
    uniq: list[tuple[int, ...]] = []
    for key in keys:
        if key not in first:
            first[key] = len(uniq)
            uniq.append(key)
        index.append(first[key])
    cached: list[tuple[int, list[tuple[Any, Any]] | None]] = [(0, None)] * len(uniq)
    prefix = None
    if store is not None:
        cached = [store.longest(u) or (0, None) for u in uniq]
        prefix = store.prefix
        if prefix is not None:
            p = prefix.ids
            if split and all(len(u) > len(p) and u[: len(p)] == p for u in uniq):
                cached = [(n, kv) if n else (len(p), None) for n, kv in cached]
            else:  # a prompt that does not extend the prefix: the kept caches take it back
                cached = [(n, _joined(prefix, kv)) if kv is not None else (0, None) for n, kv in cached]
                prefix = None
    fresh = [i for i, (n, _) in enumerate(cached) if n == 0]
    extra = {"logits_to_keep": 1} if forward_takes(model, "logits_to_keep") else {}
    if len(fresh) > 1 and share is not None:
        shared = min(_common_prefix([uniq[i] for i in fresh]), min(len(uniq[i]) for i in fresh) - 1)
        if shared >= share:
            ids = torch.tensor([uniq[fresh[0]][:shared]], device=device)
            out = model(input_ids=ids, use_cache=True, **extra)
            layers = plain_layers(_cache_of(out))
            if layers is not None:
                kv = [(x.keys, x.values) for x in layers]
                if split and len(fresh) == len(uniq):
                    prefix = _Shared(uniq[fresh[0]][:shared], kv)
                for i in fresh:
                    cached[i] = (shared, None if prefix is not None else kv)
    lead = len(prefix.ids) if prefix is not None else 0  # the rows' caches start after it
    done = max(n - lead for n, _ in cached)
    todo = max(len(u) - n for u, (n, _) in zip(uniq, cached, strict=True))
    k = len(uniq)
    id_rows: list[list[int]] = []
    mask_rows: list[list[int]] = []
    for u, (n, _) in zip(uniq, cached, strict=True):
        rest, have = list(u[n:]), n - lead
        id_rows.append([pad] * (todo - len(rest)) + rest)
        mask_rows.append([0] * (done - have) + [1] * have + [0] * (todo - len(rest)) + [1] * len(rest))
    ids = torch.tensor(id_rows, dtype=torch.long, device=device)
    mask = torch.tensor(mask_rows, dtype=torch.long, device=device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, done:] + lead
    data = _padded_cache(cached, done) if done else None
    cache = kv_cache.new_cache(model, room + (todo if data is not None else 0), data)
    if cache is None and data is not None:
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache(list(data))
    step: dict[str, Any] = {} if cache is None else {_cache_arg(model): cache}
    if prefix is not None:
        step["shared_prefix"] = prefix.layers
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **extra, **step)
    past, logits = _cache_of(out), out.logits[:, -1, :]
    if k < len(keys):
        expand = torch.tensor(index, device=device)
        past.reorder_cache(expand)  # a Cache object (transformers >= 4.36), copies each layer's rows
        logits, mask = logits[expand], mask[expand]
    return past, logits, mask, prefix


def _joined(prefix: _Shared, layers: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """A kept row cache (the ids after ``prefix``) with the prefix put back in front."""
    import torch

    return [
        (torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2))
        for (pk, pv), (k, v) in zip(prefix.layers, layers, strict=True)
    ]


def _padded_cache(cached: list[tuple[int, list[tuple[Any, Any]] | None]], width: int) -> Iterator[tuple[Any, Any]]:
    """The (keys, values) of each layer, ``width`` columns, from per-prompt caches, each
    right-aligned (zeros before it, which the attention mask hides); one layer at a time, so a
    consumer that copies each into its own buffer holds one layer's batch beside it, not all."""
    import torch

    some = next(kv for _, kv in cached if kv is not None)
    for layer in range(len(some)):
        parts = []
        for _, kv in cached:
            k0, v0 = some[layer]
            if kv is None:
                shape = (1, k0.shape[1], width, k0.shape[3])
                parts.append((k0.new_zeros(shape), v0.new_zeros((1, v0.shape[1], width, v0.shape[3]))))
                continue
            key, value = kv[layer]
            gap = width - key.shape[2]
            if gap:
                key = torch.cat([key.new_zeros((1, key.shape[1], gap, key.shape[3])), key], dim=2)
                value = torch.cat([value.new_zeros((1, value.shape[1], gap, value.shape[3])), value], dim=2)
            parts.append((key, value))
        yield torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


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
