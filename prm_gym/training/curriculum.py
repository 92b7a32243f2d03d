"""Difficulty control: online difficulty filtering and an adaptive level curriculum.

:class:`DifficultyTracker` keeps running pass rates per task and per bucket (the task's env in a
mixture, ``task.meta["env"]``, and its ``task.meta["level"]``) and picks the tasks of each step:

* **Online difficulty filtering** (Bae et al. 2025, *Online Difficulty Filtering for Reasoning
  Oriented Reinforcement Learning*; also Polaris and DAPO's follow-ups): a task whose running pass
  rate is known and lies outside ``[low, high]`` is skipped, so groups carry a learning signal.
* **Adaptive curriculum** (in the spirit of WebRL's self-evolving curriculum and AutoCurriculum
  work): per env, only levels up to the frontier are sampled; the next level unlocks when the
  frontier's pass rate reaches ``promote``; unlocked levels are weighted by how close their pass
  rate is to ``target``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from prm_gym.core.tasks import Task
from prm_gym.training.config import RecipeConfig

Bucket = tuple[str, int]


@dataclass
class _Rate:
    passed: float = 0.0
    seen: float = 0.0

    def add(self, passed: int, seen: int, decay: float) -> None:
        self.passed = self.passed * decay + passed
        self.seen = self.seen * decay + seen

    @property
    def value(self) -> float | None:
        return self.passed / self.seen if self.seen > 0 else None


@dataclass
class DifficultyTracker:
    """Running pass rates and the task picker built on them.

    Args:
        tasks: the training tasks (their ``meta`` gives ``level`` and, in a mixture, ``env``).
        cfg: the recipe options (``difficulty_*``, ``curriculum_*``).
        decay: weight of the past in the bucket rates (1: plain counts).
    """

    tasks: Sequence[Task]
    cfg: RecipeConfig
    decay: float = 0.9
    task_rate: dict[str, _Rate] = field(default_factory=dict)
    bucket_rate: dict[Bucket, _Rate] = field(default_factory=dict)
    frontier: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._bucket = {t.id: bucket_of(t) for t in self.tasks}
        for env, level in self._bucket.values():
            self.frontier[env] = min(self.frontier.get(env, level), level)

    def record(self, task_id: str, passed: int, seen: int) -> None:
        """Add ``passed`` successes out of ``seen`` episodes of ``task_id``."""
        self.task_rate.setdefault(task_id, _Rate()).add(passed, seen, 1.0)
        b = self._bucket.get(task_id)
        if b is None:
            return
        self.bucket_rate.setdefault(b, _Rate()).add(passed, seen, self.decay)
        env, level = b
        rate = self.bucket_rate[b].value
        promote = rate is not None and rate >= self.cfg.curriculum_promote
        if self.cfg.curriculum and level == self.frontier[env] and promote:
            higher = sorted({lv for e, lv in self._bucket.values() if e == env and lv > level})
            if higher:
                self.frontier[env] = higher[0]

    def allowed(self, task_id: str) -> bool:
        """False when the difficulty filter or the curriculum rules ``task_id`` out."""
        if self.cfg.curriculum:
            env, level = self._bucket[task_id]
            if level > self.frontier[env]:
                return False
        if self.cfg.difficulty_filter:
            rate = self.task_rate.get(task_id)
            value = rate.value if rate else None
            if value is not None and not (self.cfg.difficulty_low < value < self.cfg.difficulty_high):
                return False
        return True

    def weight(self, task_id: str) -> float:
        """Sampling weight: the curriculum's closeness of the task's level to the target rate."""
        if not self.cfg.curriculum:
            return 1.0
        rate = self.bucket_rate.get(self._bucket[task_id])
        value = rate.value if rate else None
        p = self.cfg.curriculum_target if value is None else value
        return math.exp(-abs(p - self.cfg.curriculum_target) / 0.25)

    def pick(self, count: int, rng: np.random.Generator, env: str | None = None) -> list[str]:
        """``count`` task ids among the allowed ones (all tasks when none is allowed); with ``env``,
        among that env's tasks only (``task.meta["env"]``: a mixture draws each env by its weight)."""
        pool = [t.id for t in self.tasks if env is None or self._bucket[t.id][0] == env]
        ids = [i for i in pool if self.allowed(i)] or pool
        w = np.array([self.weight(i) for i in ids], dtype=np.float64)
        picks = rng.choice(len(ids), size=count, replace=len(ids) < count, p=w / w.sum())
        return [ids[int(p)] for p in picks]

    def stats(self) -> dict[str, float]:
        """Scalars for the metrics log: allowed fraction and per-env frontier level."""
        out = {"curriculum/allowed_frac": sum(self.allowed(t.id) for t in self.tasks) / max(len(self.tasks), 1)}
        for env, level in self.frontier.items():
            out[f"curriculum/frontier{'/' + env if env else ''}"] = float(level)
        return out


def bucket_of(task: Task) -> Bucket:
    """``(env, level)`` of a task from its meta (``""`` and 0 when absent)."""
    level = task.meta.get("level", 0)
    try:
        lv = int(level)
    except (TypeError, ValueError):
        lv = 0
    return str(task.meta.get("env", "")), lv
