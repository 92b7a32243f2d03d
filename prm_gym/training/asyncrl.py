"""Asynchronous rollouts with bounded staleness, over any rollout source.

:class:`Prefetcher` plays the next steps' collections in one background thread while the learner
trains: at step ``s`` the collections of steps ``s .. s + depth`` are queued, each started after
the previous one, so a collection is never more than ``depth`` learner versions behind when it is
trained on (workers take new weights between groups, never inside one). ``depth = 0`` runs the
collection in the caller's thread: exactly the synchronous schedule. Every trajectory records the
policy version that generated it and its behaviour log-probs; :func:`admit` reports the lag of
each unit and drops (or keeps, for the truncated IS correction) units older than ``max_staleness``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from prm_gym.training.units import RolloutUnit

T = TypeVar("T")


@dataclass
class StalenessReport:
    """What the learner saw in one batch."""

    staleness: list[int] = field(default_factory=list)
    dropped: int = 0
    wait_s: float = 0.0

    def as_metrics(self) -> dict[str, float]:
        s = self.staleness or [0]
        return {
            "staleness_mean": sum(s) / len(s),
            "staleness_max": float(max(s)),
            "stale_dropped": float(self.dropped),
            "learner_wait_s": self.wait_s,
        }


def admit(
    units: Sequence[RolloutUnit], learner_version: int, max_staleness: int, stale: str, report: StalenessReport
) -> list[RolloutUnit]:
    """The units (GRPO groups or a task's trees) the learner at ``learner_version`` may train on.

    Each unit's lag (versions behind its oldest trajectory) goes into ``report``; a unit past
    ``max_staleness`` is dropped (and counted) when ``stale == "drop"``, kept for the truncated
    IS correction otherwise.
    """
    kept = []
    for unit in units:
        trajs = unit.leaves
        lag = learner_version - min(t.policy_version for t in trajs) if trajs else 0
        if lag > max_staleness and stale == "drop":
            report.dropped += 1
            continue
        report.staleness.append(lag)
        kept.append(unit)
    return kept


class Prefetcher(Generic[T]):
    """``get(step)``: the result of ``collect(step)``, played up to ``depth`` steps ahead.

    Args:
        collect: plays one step's collection.
        depth: steps collected ahead of the learner (0: synchronous, in the caller's thread).
        last: the number of steps; nothing past it is collected.
    """

    def __init__(self, collect: Callable[[int], T], depth: int, last: int):
        self.collect, self.depth, self.last = collect, depth, last
        self._pool = ThreadPoolExecutor(1, "prm-rollouts") if depth > 0 else None
        self._ahead: dict[int, Future[T]] = {}

    def get(self, step: int) -> tuple[T, float]:
        """``(step's collection, seconds the caller waited for it)``."""
        t0 = time.perf_counter()
        if self._pool is None:
            return self.collect(step), time.perf_counter() - t0
        for s in range(step, min(step + self.depth + 1, self.last)):
            if s not in self._ahead:
                self._ahead[s] = self._pool.submit(self.collect, s)
        result = self._ahead.pop(step).result()
        return result, time.perf_counter() - t0

    def close(self, cancel: Callable[[], None] | None = None) -> None:
        """Stop: ``cancel`` makes a running collection return early; queued ones never start."""
        if self._pool is None:
            return
        if cancel is not None and self._ahead:
            cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._ahead.clear()
