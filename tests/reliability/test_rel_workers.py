"""Rollout workers whose env infrastructure dies at a set rate: the async collector loses those
groups (counted), rebuilds the worker's envs and keeps delivering batches.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.errors import SandboxError
from prm_gym.core.hf import HFPolicy
from prm_gym.core.policy import SamplingParams
from prm_gym.core.tasks import Task
from prm_gym.envs.math import MathEnv
from prm_gym.training.asyncrl import AsyncCollector


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


def test_async_producers_survive_worker_faults(tiny_policy: Any) -> None:
    rng = np.random.default_rng(2)
    FlakyWorkerEnv.plan = [bool(rng.random() < 0.15) for _ in range(400)]
    FlakyWorkerEnv.injected = 0
    model, tok = tiny_policy.model, tiny_policy.tokenizer

    def make_policy(p: int) -> HFPolicy:
        return HFPolicy(model, tok, version=0, seed=p + 1)

    def load(policy: Any, state: Any, version: int) -> None:
        policy.version = version

    collector = AsyncCollector(
        make_policy,
        load,
        lambda: FlakyWorkerEnv(num_tasks=10, max_turns=2),
        ChatTemplate(tok),
        lambda i: (f"math-train-0-{i % 10:05d}", i),
        group_size=2,
        groups_per_step=2,
        max_staleness=1,
        producers=2,
        stale="correct",
        sampling=SamplingParams(max_new_tokens=8),
        max_context_tokens=1024,
        start_version=0,
    ).start()
    delivered = 0
    try:
        for version in range(1, 9):
            groups, _ = collector.next_batch(version - 1, timeout_s=120)
            delivered += len(groups)
            collector.publish(version, None)
    finally:
        collector.close()
    assert delivered == 16
    assert FlakyWorkerEnv.injected >= 2
    # each injected fault loses exactly one group (a group stops at its first failing reset)
    assert collector.failed_groups == FlakyWorkerEnv.injected
    print(f"\nworker faults: {FlakyWorkerEnv.injected} injected, {collector.failed_groups} lost, {delivered} delivered")
