"""Dynamic sampling, Resample-on-Correct and difficulty control on real trajectories and tasks."""

from __future__ import annotations

import numpy as np
import pytest

from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.core.errors import ConfigError
from prm_gym.envs.math.tasks import generate_math_tasks
from prm_gym.rewards.combine import CombineConfig
from prm_gym.training.collect import is_degenerate
from prm_gym.training.config import LossConfig, RecipeConfig, TrainConfig
from prm_gym.training.curriculum import DifficultyTracker, bucket_of
from prm_gym.training.recipes import error_count, resample_on_correct
from prm_gym.training.units import RolloutUnit


def traj(outcome: float, errors: int = 0, status: str = "ok", name: str = "t") -> Trajectory:
    t = Trajectory(name, "p")
    for _ in range(errors):
        info = {"tool": {"failed": 1}, "parse": {"ok": True}}
        t.turns.append(TurnRecord("a", "o", -0.1, {"tool": -0.1}, status, 0, 1, info))
    t.turns.append(TurnRecord("a", "o", outcome, {"outcome": outcome}, status, 0, 1, {"parse": {"ok": True}}))
    return t


def degenerate(group: list[Trajectory], combine: CombineConfig | None = None) -> bool:
    return is_degenerate(RolloutUnit.chain(group), LossConfig(), combine, None)


def test_degenerate_groups_are_those_without_any_advantage() -> None:
    assert degenerate([traj(0.0), traj(0.0)])
    assert degenerate([traj(1.0), traj(1.0), traj(0.0, status="infra_error")])
    assert not degenerate([traj(1.0), traj(0.0)])
    assert not degenerate([traj(1.0), traj(1.0, errors=1)])  # same outcome, different process
    assert degenerate([traj(1.0)])


def test_dynamic_sampling_tests_the_shaped_rewards_the_batch_uses() -> None:
    """With gate=0.5 the process rewards of failed episodes do not count: two failures that differ
    only in their process rewards get zero advantage, so the group is dropped (raw rewards differ)."""
    group = [traj(0.0), traj(0.0, errors=1)]
    assert not degenerate(group)
    assert degenerate(group, CombineConfig(gate=0.5))
    assert not degenerate([traj(1.0), traj(1.0, errors=1)], CombineConfig(gate=0.5))  # passed the gate


def test_roc_keeps_cleanest_correct_and_samples_failed_uniformly() -> None:
    correct = [traj(1.0, errors=e, name=f"c{e}") for e in (3, 0, 2, 1)]
    failed = [traj(0.0, errors=e, name=f"f{e}") for e in range(4)]
    group = correct + failed
    assert [error_count(t) for t in correct] == [3, 0, 2, 1]
    seen_failed: set[str] = set()
    for seed in range(30):
        kept = resample_on_correct(group, 4, ("outcome",), 1.0, np.random.default_rng(seed))
        assert len(kept) == 4
        pos = [t.task_id for t in kept if t.turns[-1].terms["outcome"] >= 1]
        assert pos == ["c0", "c1"]  # half correct, the two cleanest
        seen_failed |= {t.task_id for t in kept if t.task_id.startswith("f")}
    assert seen_failed == {"f0", "f1", "f2", "f3"}  # failures are not filtered by quality
    one = resample_on_correct([correct[0], *failed], 3, ("outcome",), 1.0, np.random.default_rng(0))
    assert sum(t.task_id.startswith("c") for t in one) == 1  # a lone success always survives


def test_difficulty_filter_skips_tasks_solved_always_or_never() -> None:
    tasks = list(generate_math_tasks(n=6, seed=0, levels=[1]))
    tr = DifficultyTracker(tasks, RecipeConfig(difficulty_filter=True, difficulty_low=0.0, difficulty_high=1.0))
    tr.record(tasks[0].id, 4, 4)
    tr.record(tasks[1].id, 0, 4)
    tr.record(tasks[2].id, 2, 4)
    assert not tr.allowed(tasks[0].id) and not tr.allowed(tasks[1].id)
    assert tr.allowed(tasks[2].id) and tr.allowed(tasks[3].id)  # intermediate and unseen stay
    picks = tr.pick(200, np.random.default_rng(0))
    assert not {tasks[0].id, tasks[1].id} & set(picks)


def test_curriculum_unlocks_the_next_level_when_the_frontier_is_passed() -> None:
    tasks = list(generate_math_tasks(n=60, seed=0, levels=[1, 2, 3]))
    cfg = RecipeConfig(curriculum=True, curriculum_promote=0.5)
    tr = DifficultyTracker(tasks, cfg)
    assert tr.frontier == {"": 1}
    levels = {bucket_of(t)[1] for t in tasks if t.id in tr.pick(100, np.random.default_rng(0))}
    assert levels == {1}
    lvl1 = [t for t in tasks if bucket_of(t)[1] == 1]
    tr.record(lvl1[0].id, 1, 4)
    assert tr.frontier[""] == 1
    tr.record(lvl1[1].id, 4, 4)  # running rate (0.9*1 + 4) / (0.9*4 + 4) >= 0.5
    assert tr.frontier[""] == 2
    assert {bucket_of(t)[1] for t in tasks if t.id in tr.pick(300, np.random.default_rng(1))} == {1, 2}
    assert tr.stats()["curriculum/frontier"] == 2.0


def test_curriculum_tracks_each_env_of_a_mixture_apart() -> None:
    from prm_gym.core.tasks import Task

    tasks = [Task(f"{e}{lv}", "q", "a", {"env": e, "level": lv}) for e in ("math", "sql") for lv in (1, 2)]
    tr = DifficultyTracker(tasks, RecipeConfig(curriculum=True))
    tr.record("math1", 3, 3)
    assert tr.frontier == {"math": 2, "sql": 1}
    assert tr.allowed("math2") and not tr.allowed("sql2")


def test_sampling_recipes_are_validated() -> None:
    with pytest.raises(ConfigError, match="roc_oversample"):
        RecipeConfig(roc_oversample=0.5)
    with pytest.raises(ConfigError, match="difficulty_low"):
        RecipeConfig(difficulty_low=0.8, difficulty_high=0.2)
    with pytest.raises(ConfigError, match="roc_oversample"):
        TrainConfig(algo="tree-grpo", recipes=RecipeConfig(roc_oversample=2))
    assert TrainConfig(algo="tree-grpo", recipes=RecipeConfig(dynamic_sampling="drop")).algo == "tree-grpo"
