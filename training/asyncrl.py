"""Asynchronous rollouts with bounded staleness.

Producer threads play GRPO groups with their own copy of the weights while the learner
trains. Every trajectory records the policy version that generated it and its behaviour
log-probs. Admission control bounds staleness: a producer may start group ``i`` only while
``i - dropped < (learner_version + max_staleness + 1) * groups_per_step``, so with
``max_staleness=0`` each batch is generated entirely by the current weights and the schedule is
exactly the synchronous one. Groups that still arrive older than ``max_staleness`` versions
(a straggler) are dropped or kept with the truncated IS correction; the staleness actually
seen is reported with every batch.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import Trajectory, rollout
from prm_gym.core.errors import InfraError
from prm_gym.core.policy import Policy, SamplingParams

DEFAULT_SAMPLING = SamplingParams()


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
    groups: list[list[Trajectory]], learner_version: int, max_staleness: int, stale: str, report: StalenessReport
) -> list[list[Trajectory]]:
    """The groups the learner at ``learner_version`` may train on: each group's lag (versions behind
    its oldest trajectory) goes into ``report``; a group past ``max_staleness`` is dropped (and
    counted) when ``stale == "drop"``, kept for the truncated IS correction otherwise."""
    kept = []
    for group in groups:
        lag = learner_version - min(t.policy_version for t in group) if group else 0
        if lag > max_staleness and stale == "drop":
            report.dropped += 1
            continue
        report.staleness.append(lag)
        kept.append(group)
    return kept


class AsyncCollector:
    """Producers generating GRPO groups concurrently with the learner.

    Args:
        make_policy: builds a producer's own policy (a copy of the learner's weights).
        load_weights: ``(policy, state, version)`` puts published weights into a producer policy.
        make_env: builds a fresh env.
        chat: the chat template.
        next_task: ``group_index -> (task_id, seed)``; deterministic in the index.
        group_size, groups_per_step: the batch shape.
        max_staleness: the bound in policy versions.
        producers: number of producer threads.
        stale: ``drop`` or ``correct`` groups that arrive older than the bound.
        sampling, max_context_tokens: as in :func:`prm_gym.agents.rollout.rollout`.
    """

    def __init__(
        self,
        make_policy: Callable[[int], Policy],
        load_weights: Callable[[Policy, Any, int], None],
        make_env: Callable[[], gym.Env],
        chat: ChatTemplate,
        next_task: Callable[[int], tuple[str, int]],
        *,
        group_size: int,
        groups_per_step: int,
        max_staleness: int,
        producers: int = 2,
        stale: str = "drop",
        sampling: SamplingParams = DEFAULT_SAMPLING,
        max_context_tokens: int = 4096,
        start_version: int = 0,
    ):
        self.make_policy, self.load_weights, self.make_env = make_policy, load_weights, make_env
        self.chat, self.next_task = chat, next_task
        self.group_size, self.groups_per_step = group_size, groups_per_step
        self.max_staleness, self.stale = max_staleness, stale
        self.sampling, self.max_context_tokens = sampling, max_context_tokens
        self._cond = threading.Condition()
        self._version = start_version
        self._weights: tuple[int, Any] | None = None
        self._issued = start_version * groups_per_step
        self._dropped = 0
        self._stop = False
        self._errors: list[BaseException] = []
        #: groups lost to an InfraError in a producer (rebuilt envs, the run goes on)
        self.failed_groups = 0
        self._queue: queue.Queue[list[Trajectory]] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._produce, args=(p,), daemon=True, name=f"producer-{p}")
            for p in range(producers)
        ]

    def start(self) -> AsyncCollector:
        for t in self._threads:
            t.start()
        return self

    def publish(self, version: int, state: Any) -> None:
        """Make new weights available to producers and advance the learner version."""
        with self._cond:
            self._weights = (version, state)
            self._version = version
            self._cond.notify_all()

    def _admit(self) -> int | None:
        with self._cond:
            limit = lambda: (self._version + self.max_staleness + 1) * self.groups_per_step  # noqa: E731
            while not self._stop and self._issued - self._dropped >= limit():
                self._cond.wait()
            if self._stop:
                return None
            self._issued += 1
            return self._issued - 1

    def _produce(self, index: int) -> None:
        try:
            policy = self.make_policy(index)
            envs = [self.make_env() for _ in range(self.group_size)]
            while (i := self._admit()) is not None:
                with self._cond:
                    weights = self._weights
                if weights is not None and weights[0] > policy.version:
                    self.load_weights(policy, weights[1], weights[0])
                task_id, seed = self.next_task(i)
                try:
                    group = rollout(
                        envs,
                        policy,
                        self.chat,
                        seeds=[seed + j for j in range(self.group_size)],
                        task_ids=[task_id] * self.group_size,
                        sampling=self.sampling,
                        max_context_tokens=self.max_context_tokens,
                    )
                except InfraError:  # a worker's env infrastructure died: lose this group, not the run
                    with self._cond:
                        self.failed_groups += 1
                        self._dropped += 1
                        self._cond.notify_all()
                    for e in envs:
                        e.close()
                    envs = [self.make_env() for _ in range(self.group_size)]
                    continue
                self._queue.put(group)
            for e in envs:
                e.close()
        except BaseException as exc:  # surfaced to the learner by next_batch()
            self._errors.append(exc)
            self._queue.put([])

    def next_batch(
        self, learner_version: int, timeout_s: float = 600.0
    ) -> tuple[list[list[Trajectory]], StalenessReport]:
        """Block until ``groups_per_step`` usable groups arrived; drop or keep stale ones."""
        import time

        report = StalenessReport()
        groups: list[list[Trajectory]] = []
        start = time.perf_counter()
        while len(groups) < self.groups_per_step:
            group = self._queue.get(timeout=timeout_s)
            if self._errors:
                raise RuntimeError(f"a rollout producer failed: {self._errors[0]!r}") from self._errors[0]
            if not admit([group], learner_version, self.max_staleness, self.stale, report):
                with self._cond:
                    self._dropped += 1
                    self._cond.notify_all()
                continue
            groups.append(group)
        report.wait_s = time.perf_counter() - start
        return groups, report

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=30)
