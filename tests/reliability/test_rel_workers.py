"""A rollout worker whose env infrastructure dies at a set rate: the source loses those groups
(counted), rebuilds the worker's envs and keeps delivering groups.
"""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np

from prm_gym.core.errors import SandboxError
from prm_gym.core.policy import SamplingParams
from prm_gym.core.tasks import Task
from prm_gym.envs.math.env import MathEnv
from prm_gym.training.sources import LocalRollouts
from prm_gym.training.worker import WorkerSpec


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
