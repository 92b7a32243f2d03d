"""Where each row of a sampling call ends its turn: its end-of-turn token or a stop string.

The HF sampler's token loop keeps its sampled ids on the device and hands them over to
:class:`TurnEnds` every few steps (:data:`prm_gym.agents.hf.SYNC_EVERY` on a GPU, every step on a
CPU); each row is cut at the first id that ends its turn, exactly where a look at every step would
have cut it, and the ids sampled after it are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TurnEnds:
    """The sampled ids of a call's rows on the host, each cut at its end of turn (the end-of-turn
    token or a stop string, kept), as the token loop hands over its device ids."""

    def __init__(self, n: int, tokenizer: Any, stop: Sequence[str]):
        self.ids: list[list[int]] = [[] for _ in range(n)]
        self.finish = ["length"] * n
        self.end: list[int | None] = [None] * n  # a finished row's length
        self.seen = 0  # the steps handed over so far
        self.live = n
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.window = max((len(s) for s in self.stop), default=0) + 2

    def all_done(self) -> bool:
        return self.live == 0

    def extend(self, columns: list[list[int]], eos: int | None) -> None:
        """Hand over each row's ids of the steps since the last call (``columns[b]``)."""
        width = len(columns[0]) if columns else 0
        self.seen += width
        for b, new in enumerate(columns):
            if self.end[b] is not None:
                continue
            row, start = self.ids[b], len(self.ids[b])
            row.extend(new)
            cut = next((start + j + 1 for j, t in enumerate(new) if t == eos), None)
            hit = self._first_stop(row, start, cut or len(row))
            if hit is not None or cut is not None:
                self.end[b] = end = min(x for x in (hit, cut) if x is not None)
                del row[end:]
                self.finish[b] = "stop"
                self.live -= 1

    def _first_stop(self, row: list[int], start: int, stop_at: int) -> int | None:
        """The shortest length in ``start + 1 .. stop_at`` at which ``row`` ends with a stop string
        (its last ``window`` ids decoded contain one), or None."""
        if not self.stop or stop_at <= start:
            return None
        lengths = range(start + 1, stop_at + 1)
        texts = self.tokenizer.batch_decode([row[max(0, k - self.window) : k] for k in lengths])
        return next((k for k, text in zip(lengths, texts, strict=True) if any(s in text for s in self.stop)), None)
