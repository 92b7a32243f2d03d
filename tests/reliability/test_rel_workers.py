"""A rollout worker whose env infrastructure dies at a set rate: the source loses those groups
(counted), rebuilds the worker's envs and keeps delivering groups.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from prm_gym.core.errors import SandboxError
from prm_gym.core.policy import SamplingParams
from prm_gym.core.tasks import Task
from prm_gym.envs.math.env import MathEnv
from prm_gym.training.metrics import read_metrics
from prm_gym.training.sources import LocalRollouts
from prm_gym.training.trainer import train
from prm_gym.training.worker import RolloutWorker, WorkerSpec
from tests.training.test_trainer import small


class FlakyWorkerEnv(MathEnv):
    """A real Math env whose episode start fails (its backend died) when the shared plan says so."""

    plan: list[bool]
    lock = threading.Lock()
    injected = 0

    def start_episode(self, task: Task) -> None:
        with FlakyWorkerEnv.lock:
            fail = FlakyWorkerEnv.plan.pop(0) if FlakyWorkerEnv.plan else False
            FlakyWorkerEnv.injected += fail
        if fail:
            raise SandboxError("injected: the worker's backend was killed")


def test_rollout_worker_survives_env_faults() -> None:
    rng = np.random.default_rng(2)
    FlakyWorkerEnv.plan = [bool(rng.random() < 0.15) for _ in range(400)]
    FlakyWorkerEnv.injected = 0
    if "test/FlakyMath-v0" not in gym.registry:
        gym.register("test/FlakyMath-v0", entry_point=FlakyWorkerEnv, kwargs={"num_tasks": 10, "max_turns": 2})
    source = LocalRollouts(WorkerSpec("test/FlakyMath-v0"))
    jobs = [(f"math-train-0-{i % 10:05d}", [i, i + 1]) for i in range(16)]
    try:
        groups, stats = source.collect(jobs, SamplingParams(max_new_tokens=8), 1024)
    finally:
        source.close()
    assert FlakyWorkerEnv.injected >= 2
    # each injected fault loses exactly one group (a group stops at its first failing reset); the rest arrive
    assert stats.dropped_groups == FlakyWorkerEnv.injected
    assert len(groups) + stats.dropped_groups == 16 and all(len(g.leaves) == 2 for g in groups)
    print(f"\nworker faults: {FlakyWorkerEnv.injected} injected, {stats.dropped_groups} lost, {len(groups)} delivered")


def test_lost_groups_are_counted_in_every_step_of_metrics_jsonl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer logs ``rollout/dropped_groups`` in each step's row of metrics.jsonl: 0 when no
    group failed, the number lost otherwise, also for a step that lost every group."""
    play = RolloutWorker.play
    plan = {1: 1, 3: 2}  # collect call (one per step) -> how many of its groups fail at episode start
    calls = {"collect": 0}
    failed = {"n": 0}
    collect = LocalRollouts.collect

    def counting_collect(self: LocalRollouts, *args: Any, **kwargs: Any) -> Any:
        calls["collect"] += 1
        failed["n"] = 0
        return collect(self, *args, **kwargs)

    def flaky_play(self: RolloutWorker, *args: Any, **kwargs: Any) -> Any:
        if failed["n"] < plan.get(calls["collect"], 0):
            failed["n"] += 1
            raise SandboxError("injected: the worker's backend was killed")
        return play(self, *args, **kwargs)

    monkeypatch.setattr(LocalRollouts, "collect", counting_collect)
    monkeypatch.setattr(RolloutWorker, "play", flaky_play)
    run = train(small(tmp_path, steps=3, tasks_per_step=2, checkpoint_every=0))
    rows = [r for r in read_metrics(tmp_path) if "rollout_s" in r]
    assert run.step == 3 and [r["step"] for r in rows] == [1, 2, 3]
    assert [r["rollout/dropped_groups"] for r in rows] == [1.0, 0.0, 2.0]
    assert rows[0]["trained_rows"] == 2 and "trained_rows" not in rows[2]  # step 3 lost both of its groups
