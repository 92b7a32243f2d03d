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

import importlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prm_gym.agents.rollout import Trajectory
from prm_gym.core.policy import SamplingParams
from prm_gym.training.config import TreeConfig
from prm_gym.training.tree import TreeSample


@dataclass(frozen=True)
class WorkerSpec:
    """What every rollout worker builds.

    Attributes:
        env_id: the registered env id.
        env_kwargs: keyword arguments for ``gym.make``.
        policy: ``hf:<id>`` or ``vllm-engine:<dir>`` (weights published by the learner), or
            ``vllm:<url>[,<url>...]``.
        tokenizer: for a ``vllm:`` policy, the ``hf:`` id whose tokenizer the server speaks.
        served_model: for a ``vllm:`` policy, the served model name.
        imports: modules to import first (third-party envs and judges).
        seed: base seed of the workers' samplers.
        tools_prompt: the chat template's tool block (``full`` or ``compact``).
    """

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy: str = "hf:tiny"
    tokenizer: str = "hf:tiny"
    served_model: str = "policy"
    imports: tuple[str, ...] = ()
    seed: int = 0
    tools_prompt: str = "full"


def build_policy(spec: WorkerSpec, seed: int) -> Any:
    """The policy a worker samples from."""
    from prm_gym.core.hf import HFPolicy
    from prm_gym.core.models import load_hf

    if spec.policy.startswith("vllm-engine:"):
        from prm_gym.agents.vllm_engine import VLLMEnginePolicy

        return VLLMEnginePolicy.from_id(spec.policy, seed=seed)
    if spec.policy.startswith("vllm:"):
        from prm_gym.agents.vllm import VLLMPolicy

        _, tok = load_hf(spec.tokenizer, seed)
        return VLLMPolicy(spec.policy[5:].split(","), tok, model=spec.served_model, seed=seed)
    return HFPolicy.from_id(spec.policy, seed=seed)


def _portable(trajs: list[Trajectory]) -> list[Trajectory]:
    """``trajs`` with only plain values left in their turns' infos (sent to another process)."""
    for t in trajs:
        for turn in t.turns:
            turn.info = {k: v for k, v in turn.info.items() if isinstance(v, (int, float, str, bool, dict))}
    return trajs


class RolloutWorker:
    """One worker: envs + judges + sandboxes + a policy; plays whole GRPO groups."""

    def __init__(self, spec: WorkerSpec, index: int):
        import prm_gym  # noqa: F401  (registers prm/ ids)

        for module in spec.imports:
            importlib.import_module(module)
        from prm_gym.agents.chat import ChatTemplate

        self.spec = spec
        self.index = index
        self.policy = build_policy(spec, seed=spec.seed * 1000 + index + 1)
        self.chat = ChatTemplate(self.policy.tokenizer, tools_block=spec.tools_prompt)
        self.envs: list[Any] = []

    def ping(self) -> int:
        import os

        return os.getpid()

    def set_weights(self, state: Any, version: int) -> int:
        """Load published weights (``None`` for a vLLM server policy: only the version moves)."""
        if state is not None and hasattr(self.policy, "load_weights"):  # an in-process vLLM engine
            self.policy.load_weights(state, version)
        elif state is not None and hasattr(self.policy, "model"):
            self.policy.model.load_state_dict(state)
        self.policy.version = version
        return version

    def play(
        self,
        task_id: str,
        seeds: Sequence[int],
        sampling: SamplingParams,
        max_context_tokens: int,
        tree: TreeConfig | None = None,
    ) -> list[Trajectory] | TreeSample:
        """One group: ``len(seeds)`` episodes of ``task_id``; with ``tree``, that task's Tree-GRPO
        trees instead (reset seed ``seeds[0]``, branch points drawn from a generator seeded by
        ``seeds``), as a :class:`prm_gym.training.tree.TreeSample`."""
        import gymnasium as gym

        from prm_gym.agents.rollout import rollout

        if tree is not None:
            return self._play_tree(task_id, seeds, sampling, max_context_tokens, tree)
        while len(self.envs) < len(seeds):
            self.envs.append(gym.make(self.spec.env_id, **self.spec.env_kwargs))
        trajs = rollout(
            self.envs[: len(seeds)],
            self.policy,
            self.chat,
            seeds=list(seeds),
            task_ids=[task_id] * len(seeds),
            sampling=sampling,
            max_context_tokens=max_context_tokens,
        )
        return _portable(trajs)

    def _play_tree(
        self, task_id: str, seeds: Sequence[int], sampling: SamplingParams, max_context_tokens: int, tree: TreeConfig
    ) -> TreeSample:
        import gymnasium as gym
        import numpy as np

        from prm_gym.training.tree import sample_trees

        sample = sample_trees(
            lambda: gym.make(self.spec.env_id, **self.spec.env_kwargs),
            self.policy,
            self.chat,
            [task_id],
            [seeds[0]],
            tree,
            np.random.default_rng(list(seeds)),
            sampling=sampling,
            max_context_tokens=max_context_tokens,
        )
        _portable(sample.leaves)
        return sample

    def close(self) -> None:
        for e in self.envs:
            e.close()
        self.envs.clear()


@dataclass
class CollectStats:
    """What one :meth:`RayRollouts.collect` call survived."""

    worker_deaths: int = 0
    retried_groups: int = 0
    dropped_groups: int = 0

    def as_metrics(self) -> dict[str, float]:
        return {f"ray/{k}": float(v) for k, v in self.__dict__.items()}


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
        import ray

        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}.")
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
            from prm_gym.core.errors import InfraError

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
        import ray

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
        groups: Sequence[tuple[str, Sequence[int]]],
        sampling: SamplingParams,
        max_context_tokens: int,
        tree: TreeConfig | None = None,
    ) -> tuple[list[Any], CollectStats]:
        """Play every ``(task_id, seeds)`` group (with ``tree``: every task's trees, see
        :meth:`RolloutWorker.play`); returns the groups that finished, in order."""
        import ray

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
                task_id, seeds = groups[g]
                actor = self.actors[w]
                ref = actor.play.remote(task_id, list(seeds), sampling, max_context_tokens, tree)
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
                from prm_gym.core.errors import InfraError

                if not isinstance(exc.as_instanceof_cause(), InfraError):
                    raise
                self._retry(g, tries, pending, stats)
            free.append(w)
        return [results[g] for g in sorted(results)], stats

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
        import ray

        ray.kill(self.actors[index], no_restart=True)

    def close(self) -> None:
        """Stop the actors (and the local Ray cluster this pool started); idempotent."""
        import ray

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
