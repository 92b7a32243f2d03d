"""Rollout workers as Ray actors: the same envs, judges, sandboxes and rollout loop, on many CPUs.

:class:`RayRollouts` starts ``num_workers`` :class:`RolloutWorker` actors on a local Ray
cluster (or joins one by address). Each worker builds its own envs with ``gym.make`` (so judges,
sandboxes and retrievers live in the worker) and its own policy: an ``hf:`` model whose weights
the learner publishes after every step (one ``ray.put``, shared by all workers), or a
``vllm:<url>[,<url>...]`` client of vLLM servers that the learner updates itself.

Groups are handed out dynamically (a free worker takes the next group). A worker that dies
is replaced and its group retried up to ``max_retries`` times; a group that still fails, or
whose policy server failed, is dropped and counted, and the run goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import ray

from prm_gym.agents.rollout import Trajectory
from prm_gym.core.errors import ConfigError, InfraError
from prm_gym.core.policy import SamplingParams
from prm_gym.training.config import TreeConfig
from prm_gym.training.units import RolloutUnit
from prm_gym.training.worker import CollectStats, Job, RolloutWorker, WorkerSpec, eval_chunks


class RayRollouts:
    """A pool of :class:`RolloutWorker` actors.

    Args:
        spec: what each worker builds.
        num_workers: actors to start.
        address: an existing Ray cluster (``ray://host:10001`` or ``auto``); empty: a local one.
        max_retries: retries of a group whose worker died.
        cpus_per_worker: CPUs Ray reserves for each actor.
        start_timeout_s: how long the workers may take to start (Ray holds an actor back until
            the cluster has its CPUs free); past it the pool closes and raises ``InfraError``.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        num_workers: int,
        *,
        address: str = "",
        max_retries: int = 2,
        cpus_per_worker: float = 1,
        start_timeout_s: float = 300.0,
    ):
        if num_workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got {num_workers}.")
        self.spec, self.max_retries, self.cpus = spec, max_retries, cpus_per_worker
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            kwargs: dict[str, Any] = {"address": address} if address else {"num_cpus": max(2, num_workers)}
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **kwargs)
        self._actor_cls = ray.remote(num_cpus=cpus_per_worker, max_restarts=0)(RolloutWorker)
        self._state_ref: Any = None
        self.version = 0
        self._lock = threading.Lock()  # publish() and a collect() in another thread may both replace an actor
        self._cancel = threading.Event()
        free = float(ray.available_resources().get("CPU", 0.0))
        self.actors = [self._spawn(i) for i in range(num_workers)]
        try:
            ray.get([a.ping.remote() for a in self.actors], timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise InfraError(
                f"{num_workers} Ray workers did not start within {start_timeout_s:g}s: they need "
                f"{num_workers * cpus_per_worker:g} CPUs and the cluster had {free:g} free; "
                "lower --num-workers or add nodes."
            ) from None

    def _spawn(self, index: int) -> Any:
        actor: Any = self._actor_cls.remote(self.spec, index)
        if self._state_ref is not None or self.version:
            actor.set_weights.remote(self._state_ref, self.version)
        return actor

    def _replace(self, index: int, dead: Any) -> None:
        """Start a new actor in place of ``dead`` (once, however many callers saw it die)."""
        with self._lock:
            if self.actors[index] is dead:
                self.actors[index] = self._spawn(index)

    def publish(self, state: Any, version: int, *, wait: bool = True) -> None:
        """Send new weights (``None`` for vLLM policies) to every worker; ``wait``: until all have them.

        A worker busy with a group (a ``collect`` running in another thread) takes the weights
        when that group is done: each actor runs one call at a time, so no group mixes weights.
        With ``wait=False`` the learner goes on meanwhile (a worker that died is replaced, with
        the newest weights, by the ``collect`` that finds it dead).
        """
        with self._lock:
            self._state_ref = ray.put(state) if state is not None else None
            self.version = version
            actors = list(self.actors)
        refs = [a.set_weights.remote(self._state_ref, version) for a in actors]
        if not wait:
            return
        for i, ref in enumerate(refs):
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                self._replace(i, actors[i])

    def collect(
        self,
        groups: Sequence[Job],
        sampling: SamplingParams,
        max_context_tokens: int,
        tree: TreeConfig | None = None,
    ) -> tuple[list[RolloutUnit], CollectStats]:
        """Play every ``(task_id, seeds[, env])`` group (with ``tree``: every task's trees, see
        :meth:`RolloutWorker.play`); returns the groups that finished, in order."""
        stats = CollectStats()
        pending = list(range(len(groups)))[::-1]
        tries = [0] * len(groups)
        results: dict[int, Any] = {}
        running: dict[Any, tuple[int, int, Any]] = {}
        free = list(range(len(self.actors)))
        while pending or running:
            if self._cancel.is_set():  # cancel(): start no more groups, stop waiting for running ones
                break
            while pending and free:
                g, w = pending.pop(), free.pop()
                task_id, seeds, env = Job(*groups[g])
                actor = self.actors[w]
                ref = actor.play.remote(task_id, list(seeds), sampling, max_context_tokens, tree, env)
                running[ref] = (g, w, actor)
            done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            if not done:  # still playing: look at cancel() again
                continue
            g, w, actor = running.pop(done[0])
            try:
                results[g] = ray.get(done[0])
            except ray.exceptions.RayActorError:
                stats.worker_deaths += 1
                self._replace(w, actor)
                self._retry(g, tries, pending, stats)
            except ray.exceptions.RayTaskError as exc:
                if not isinstance(exc.as_instanceof_cause(), InfraError):
                    raise
                self._retry(g, tries, pending, stats)
            free.append(w)
        return [results[g] for g in sorted(results)], stats

    def evaluate(
        self, env_id: str, episodes: Sequence[tuple[str, int]], sampling: SamplingParams, max_context_tokens: int
    ) -> list[Trajectory]:
        """Held-out episodes, in chunks (:func:`prm_gym.training.worker.eval_chunks`) spread over
        the actors (each has the newest weights: an actor runs its calls in order); a chunk whose
        actor died is replayed on its replacement (up to ``max_retries`` times). In order."""
        chunks = eval_chunks(episodes)
        out: list[list[Trajectory]] = []
        for lo in range(0, len(chunks), len(self.actors)):
            wave = list(enumerate(chunks[lo : lo + len(self.actors)]))
            actors = list(self.actors)
            refs = [actors[w].evaluate.remote(env_id, c, sampling, max_context_tokens) for w, c in wave]
            for (w, chunk), ref in zip(wave, refs, strict=True):
                for attempt in range(self.max_retries + 1):
                    try:
                        out.append(ray.get(ref))
                        break
                    except ray.exceptions.RayActorError:
                        if attempt == self.max_retries:
                            raise InfraError(f"held-out evaluation: worker {w} died {attempt + 1} times") from None
                        self._replace(w, actors[w])
                        actors[w] = self.actors[w]
                        ref = actors[w].evaluate.remote(env_id, chunk, sampling, max_context_tokens)
        return [t for part in out for t in part]

    def cancel(self) -> None:
        """Make a ``collect`` running in another thread return within a second, leaving its running
        groups to the actors (which :meth:`close` then kills)."""
        self._cancel.set()

    def _retry(self, g: int, tries: list[int], pending: list[int], stats: CollectStats) -> None:
        tries[g] += 1
        if tries[g] <= self.max_retries:
            stats.retried_groups += 1
            pending.append(g)
        else:
            stats.dropped_groups += 1

    def kill_worker(self, index: int) -> None:
        """Kill one actor (tests and chaos drills); the next collect replaces it."""
        ray.kill(self.actors[index], no_restart=True)

    def close(self) -> None:
        """Stop the actors (and the local Ray cluster this pool started); idempotent."""
        if not ray.is_initialized():
            return
        for a in self.actors:
            ray.kill(a, no_restart=True)
        self.actors = []
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self) -> RayRollouts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
