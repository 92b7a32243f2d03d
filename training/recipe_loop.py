"""One GRPO step's collection with the rollout recipes of :class:`prm_gym.training.config.RecipeConfig`.

Used by :func:`prm_gym.training.trainer.train` instead of :func:`prm_gym.training.trainer.collect_sync` when any of
dynamic sampling, Resample-on-Correct, online difficulty filtering or the curriculum is on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from prm_gym.agents.rollout import Trajectory, rollout
from prm_gym.training.batch import Grouping, outcome_and_process
from prm_gym.training.curriculum import DifficultyTracker
from prm_gym.training.recipes import is_degenerate, resample_on_correct, split_groups

if TYPE_CHECKING:
    from prm_gym.training.trainer import Run


def make_tracker(run: Run) -> DifficultyTracker | None:
    """A :class:`DifficultyTracker` over the run's training tasks when a difficulty recipe is on."""
    r = run.cfg.recipes
    if not (r.difficulty_filter or r.curriculum):
        return None
    env = run.make_env()
    try:
        tasks = [env.unwrapped.tasks.get(i) for i in run.train_ids]  # type: ignore[attr-defined]
    finally:
        env.close()
    return DifficultyTracker(tasks, r)


def _pick(run: Run, tracker: DifficultyTracker | None, rng: np.random.Generator) -> list[str]:
    n = run.cfg.tasks_per_step
    if tracker is not None:
        return tracker.pick(n, rng)
    picks = rng.choice(len(run.train_ids), size=n, replace=len(run.train_ids) < n)
    return [run.train_ids[int(p)] for p in picks]


def collect_recipes(
    run: Run, envs: list[gym.Env], tracker: DifficultyTracker | None
) -> tuple[list[Trajectory], Grouping, dict[str, float]]:
    """Collect ``tasks_per_step`` groups, applying RoC, dynamic sampling and difficulty control.

    ``envs`` grows to ``ceil(group_size * roc_oversample) * tasks_per_step`` envs when needed.
    When dynamic sampling drops every group of every round, the last round's groups are trained
    on anyway (their advantages are 0) and ``dynamic/all_dropped`` is 1.
    """
    cfg, r = run.cfg, run.cfg.recipes
    g = cfg.group_size
    g_roll = math.ceil(g * r.roc_oversample)
    rng = np.random.default_rng([cfg.seed, run.step, 2])
    while len(envs) < g_roll * cfg.tasks_per_step:
        envs.append(run.make_env())
    kept: list[list[Trajectory]] = []
    last: list[list[Trajectory]] = []
    stats = {"dynamic/dropped_groups": 0.0, "dynamic/rounds": 0.0, "generated_tokens": 0.0}
    while True:
        ids = _pick(run, tracker, rng)
        seeds = [int(s) for s in rng.integers(2**31 - 1, size=len(ids))]
        trajs = rollout(
            envs[: g_roll * len(ids)],
            run.policy,
            run.chat,
            seeds=[s + j for s in seeds for j in range(g_roll)],
            task_ids=[t for t in ids for _ in range(g_roll)],
            sampling=run.sampling,
            max_context_tokens=cfg.sampling.max_context_tokens,
        )
        stats["generated_tokens"] += float(sum(t.num_generated_tokens for t in trajs))
        stats["dynamic/rounds"] += 1
        last = []
        for tid, group in zip(ids, split_groups(trajs, g_roll), strict=True):
            outcomes = [outcome_and_process(t, cfg.loss.outcome_terms)[0] for t in group if not t.infra_error]
            if tracker is not None:
                tracker.record(tid, sum(o >= r.success_threshold for o in outcomes), len(outcomes))
            if g_roll > g:
                group = resample_on_correct(group, g, cfg.loss.outcome_terms, r.success_threshold, rng)
            last.append(group)
            if r.dynamic_sampling != "off" and is_degenerate(group):
                stats["dynamic/dropped_groups"] += 1
                continue
            kept.append(group)
        done = len(kept) >= cfg.tasks_per_step or stats["dynamic/rounds"] >= r.max_resample_rounds
        if r.dynamic_sampling != "resample" or done:
            break
    stats["dynamic/all_dropped"] = float(not kept)
    groups = kept[: cfg.tasks_per_step] or last
    if tracker is not None:
        stats.update(tracker.stats())
    out = [t for grp in groups for t in grp]
    return out, Grouping([i for i, grp in enumerate(groups) for _ in grp]), stats
