"""One step's collection, whatever the rollout source: which tasks, chain groups or trees, and the
rollout recipes (dynamic sampling, Resample-on-Correct, online difficulty filter, curriculum).

A step's *units* (:class:`prm_gym.training.units.RolloutUnit`, one per task) are GRPO groups or,
with ``--algo tree-grpo``, a task's trees. The recipes act on units, so they work
with chains and trees (except RoC, which down-samples a flat oversampled group), in-process or
on Ray, synchronous or asynchronous.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from prm_gym.core.policy import SamplingParams
from prm_gym.core.seams import trainer_env
from prm_gym.core.tasks import Task
from prm_gym.rewards.combine import CombineConfig
from prm_gym.training.batch import compute_advantages, outcome_and_process
from prm_gym.training.config import LossConfig, TrainConfig
from prm_gym.training.curriculum import DifficultyTracker
from prm_gym.training.mixture import draw_tasks, task_key, uniform_chooser
from prm_gym.training.recipes import resample_on_correct
from prm_gym.training.run import Run
from prm_gym.training.sources import Job, RolloutSource
from prm_gym.training.units import RolloutUnit
from prm_gym.training.worker import CollectStats


def step_tasks(
    cfg: TrainConfig, train_ids: Mapping[str, Sequence[str]], index: int, count: int
) -> list[tuple[str, str, int]]:
    """``count`` (env id, task id, episode seed) triples for step ``index``, each env drawn by its
    weight (:func:`prm_gym.training.mixture.draw_tasks`); deterministic in the index, so a resumed
    run draws what an uninterrupted one would."""
    rng = np.random.default_rng([cfg.seed, index])
    picks = draw_tasks(rng, cfg.env_shares, count, uniform_chooser(train_ids))
    return [(env, t, int(rng.integers(2**31 - 1))) for env, t in picks]


def make_tracker(cfg: TrainConfig, run: Run) -> DifficultyTracker | None:
    """A :class:`DifficultyTracker` over the run's training tasks when a difficulty recipe is on.

    In a mixture each task is keyed by :func:`prm_gym.training.mixture.task_key` and its ``env``
    meta is its env id, so levels are tracked per env."""
    r = cfg.recipes
    if not (r.difficulty_filter or r.curriculum):
        return None
    tasks: list[Task] = []
    for env_id, ids in run.train_ids.items():
        env = run.make_envs[env_id]()
        try:
            task_set = trainer_env(env, where=f"env {env_id}").tasks
            found = [task_set.get(i) for i in ids]
        finally:
            env.close()
        if len(run.train_ids) > 1:
            found = [Task(task_key(env_id, t.id), t.prompt, t.answer, {**t.meta, "env": env_id}) for t in found]
        tasks += found
    return DifficultyTracker(tasks, r)


def is_degenerate(
    unit: RolloutUnit, loss: LossConfig, combine: CombineConfig | None, max_new_tokens: int | None
) -> bool:
    """True when the unit's advantages, computed from the same shaped rewards the batch will use
    (judge-expression options such as ``gate``, the overlong penalty), are all zero: it would add
    no gradient (DAPO's dynamic sampling, Yu et al. 2025, section 3.2). A unit with fewer than two
    valid trajectories has no baseline and is degenerate too."""
    adv, valid, _ = compute_advantages(unit.leaves, unit.grouping, loss, combine, max_new_tokens)
    return not bool(valid.any()) or float(adv[valid].abs().max()) < 1e-9


@dataclass
class Collected:
    """What one step collected: its units and the collection's metrics."""

    units: list[RolloutUnit]
    stats: dict[str, float] = field(default_factory=dict)


class StepCollector:
    """``collector(step) -> Collected``: picks the step's tasks, plays them on ``source``, applies the recipes.

    Args:
        cfg: the run's config (algorithm, group size, recipes, sampling).
        source: where episodes are played.
        train_ids: the training task ids of each env of the run.
        tracker: the difficulty tracker (difficulty filter / curriculum), or None.
        combine: the env judge expression's combination options, so that dynamic sampling tests the
            same shaped rewards the advantages are computed from.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        source: RolloutSource,
        train_ids: Mapping[str, Sequence[str]],
        tracker: DifficultyTracker | None = None,
        combine: CombineConfig | None = None,
    ):
        self.cfg, self.source = cfg, source
        self.train_ids = {env: list(ids) for env, ids in train_ids.items()}
        self.tracker, self.combine = tracker, combine
        s = cfg.sampling
        self.sampling = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature)
        self.tree = cfg.tree if cfg.algo == "tree-grpo" else None
        self.max_new_tokens = s.max_new_tokens
        self.width = math.ceil(cfg.group_size * cfg.recipes.roc_oversample)  # episodes played per group

    def __call__(self, step: int) -> Collected:
        cfg, r = self.cfg, self.cfg.recipes
        kept: list[RolloutUnit] = []
        last: list[RolloutUnit] = []
        stats = {"generated_tokens": 0.0}
        survived = CollectStats()
        if r.dynamic_sampling != "off":
            stats.update({"dynamic/dropped_groups": 0.0, "dynamic/rounds": 0.0})
        rounds = 0
        while True:
            rng = np.random.default_rng([cfg.seed, step, 2, rounds])
            units = self._play(step, self._pick(step, rounds, rng), survived)
            rounds += 1
            stats["generated_tokens"] += float(sum(u.generated_tokens for u in units))
            last = [self._roc(u, rng) for u in units]
            for unit in last:
                if r.dynamic_sampling != "off" and is_degenerate(
                    unit, cfg.loss, self.combine, cfg.sampling.max_new_tokens
                ):
                    stats["dynamic/dropped_groups"] += 1
                    continue
                kept.append(unit)
            if r.dynamic_sampling != "resample" or len(kept) >= cfg.tasks_per_step or rounds >= r.max_resample_rounds:
                break
        if r.dynamic_sampling != "off":
            stats["dynamic/rounds"] = float(rounds)
            stats["dynamic/all_dropped"] = float(not kept)
        if self.tracker is not None:
            stats.update(self.tracker.stats())
        stats.update(survived.as_metrics())
        units = kept[: cfg.tasks_per_step] or last
        informative = sum(not is_degenerate(u, cfg.loss, self.combine, self.max_new_tokens) for u in units)
        stats.update({"groups/informative": float(informative), "groups/trained": float(len(units))})  # carry a signal
        return Collected(units, stats)

    def _pick(self, step: int, rounds: int, rng: np.random.Generator) -> list[tuple[str, str, int]]:
        n = self.cfg.tasks_per_step
        if self.tracker is None and rounds == 0:
            return step_tasks(self.cfg, self.train_ids, step, n)
        picks = draw_tasks(rng, self.cfg.env_shares, n, self._choose)
        return [(e, t, int(s)) for (e, t), s in zip(picks, rng.integers(2**31 - 1, size=len(picks)), strict=True)]

    def _choose(self, env: str, count: int, rng: np.random.Generator) -> list[str]:
        if self.tracker is None:
            return uniform_chooser(self.train_ids)(env, count, rng)
        if len(self.train_ids) == 1:
            return self.tracker.pick(count, rng)
        return [key[len(task_key(env, "")) :] for key in self.tracker.pick(count, rng, env=env)]

    def _play(self, step: int, picks: list[tuple[str, str, int]], survived: CollectStats) -> list[RolloutUnit]:
        if self.tree is not None:  # one job per task: its trees, branch points seeded by (task seed, run seed, step)
            jobs = [Job(t, [s, self.cfg.seed, step], env) for env, t, s in picks]
        else:
            jobs = [Job(t, [s + j for j in range(self.width)], env) for env, t, s in picks]
        units, cstats = self.source.collect(jobs, self.sampling, self.cfg.sampling.max_context_tokens, self.tree)
        survived.add(cstats)
        if self.tracker is not None:
            for unit in units:
                self._record(unit)
        return units

    def _record(self, unit: RolloutUnit) -> None:
        assert self.tracker is not None
        trajs = [t for t in unit.leaves if not t.infra_error]
        threshold = self.cfg.recipes.success_threshold
        outcomes = [outcome_and_process(t, self.cfg.loss.outcome_terms)[0] for t in trajs]
        if trajs:
            key = trajs[0].task_id if len(self.train_ids) == 1 else task_key(trajs[0].env_id, trajs[0].task_id)
            self.tracker.record(key, sum(o >= threshold for o in outcomes), len(outcomes))

    def _roc(self, unit: RolloutUnit, rng: np.random.Generator) -> RolloutUnit:
        if self.width <= self.cfg.group_size:  # RoC off (the config refuses it with trees)
            return unit
        r = self.cfg.recipes
        kept = resample_on_correct(
            unit.leaves, self.cfg.group_size, self.cfg.loss.outcome_terms, r.success_threshold, rng
        )
        return RolloutUnit.chain(kept)
