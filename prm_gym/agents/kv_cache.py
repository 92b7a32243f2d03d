"""The sampler's KV cache: transformers' dynamic cache, with room reserved for the ids to come.

transformers' ``DynamicLayer`` appends each step's keys and values with ``torch.cat``, which copies
the whole cache of the layer every step: at 50 rows of a 600-id context that copy was about a
quarter of a SmolLM2-135M decode step on a CPU (``aten::cat`` 27%, beside attention 34% and the
matmuls 29%). :class:`RoomyLayer` writes them into a buffer with room for the call's remaining
ids instead, and hands out views of its filled part, so a step copies only its new column. The
values, and so every sampled id and log-prob, are the same (attention reads the same numbers
through a strided view). It also avoids the transient second copy of each layer a ``cat`` makes.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any, cast


@cache
def roomy_layer_class() -> type:
    """The :class:`RoomyLayer` class (built on first use: transformers is imported lazily)."""
    from transformers.cache_utils import DynamicLayer

    class RoomyLayer(DynamicLayer):
        """A :class:`DynamicLayer` whose keys and values are views of a buffer with ``room`` spare columns.

        Anything else that replaces ``keys`` (``reorder_cache``, ``crop``, a batch selection: they
        copy) is taken as the new content at the next ``update``, which moves it into a fresh buffer.
        """

        room = 0
        _held: Any = None  # the view handed out by the last update: keys not it were replaced since
        _k: Any = None
        _v: Any = None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            keys = cast(Any, self.keys)
            n, m = (keys.shape[-2] if keys.numel() else 0), key_states.shape[-2]
            if self._held is not self.keys or n + m > self._k.shape[-2]:
                self._move(n, key_states, value_states)
            self._k[:, :, n : n + m].copy_(key_states)
            self._v[:, :, n : n + m].copy_(value_states)
            self.keys, self.values = self._k[:, :, : n + m], self._v[:, :, : n + m]
            self._held = self.keys
            return self.keys, self.values

        def _move(self, n: int, key_states: Any, value_states: Any) -> None:
            """New buffers holding the first ``n`` columns of ``keys``/``values``, with room for
            ``key_states``' columns and ``room`` more."""
            width = n + key_states.shape[-2] + self.room
            b, h = key_states.shape[:2]
            k = key_states.new_empty((b, h, width, key_states.shape[-1]))
            v = value_states.new_empty((b, value_states.shape[1], width, value_states.shape[-1]))
            if n:
                k[:, :, :n].copy_(cast(Any, self.keys))
                v[:, :, :n].copy_(cast(Any, self.values))
            self._k, self._v = k, v

        def reorder_cache(self, beam_idx: Any) -> None:
            """Rows picked (and repeated) by ``beam_idx``, room kept: one copy of the buffers."""
            keys = cast(Any, self.keys)
            if self._held is not keys or not keys.numel():
                super().reorder_cache(beam_idx)
                return
            n, idx = keys.shape[-2], beam_idx.to(self._k.device)
            self._k, self._v = self._k.index_select(0, idx), self._v.index_select(0, idx)
            self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]
            self._held = self.keys

    return RoomyLayer


def plain_layers(cache: Any) -> list[Any] | None:
    """The per-layer (keys, values) holders of a plain dynamic cache (ours or transformers'), or
    None (a cache of another kind: sliding windows, quantized, static...)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = getattr(cache, "layers", None)
    kinds = (DynamicLayer, roomy_layer_class())
    if type(cache) is not DynamicCache or not layers or any(type(x) not in kinds for x in layers):
        return None
    return list(layers)


def new_cache(model: Any, room: int, data: Iterable[tuple[Any, Any]] | None = None) -> Any:
    """An empty cache for ``model`` (or one holding ``data``, a (keys, values) pair per layer, taken
    one layer at a time) whose layers keep ``room`` spare columns; None when ``model``'s layers are
    not all plain full-attention ones, or it has no transformers config (the caller then lets the
    model make its own cache)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    config = getattr(model, "config", None)
    probe = DynamicCache(config=config) if config is not None else None
    if probe is None or not probe.layers or any(type(x) is not DynamicLayer for x in probe.layers):
        return None
    cls = roomy_layer_class()
    pairs = iter(data) if data is not None else None
    layers = []
    for _ in range(len(probe.layers)):
        layer = cls()
        layer.room = room
        if pairs is not None:
            layer.update(*next(pairs))
        layers.append(layer)
    probe.layers = layers
    return probe
