"""A rollout worker: its own envs, judges, sandboxes and policy; plays whole GRPO groups or a
task's Tree-GRPO trees. The same class runs in this process (:class:`prm_gym.training.sources.LocalRollouts`)
and as a Ray actor (:class:`prm_gym.training.distributed.RayRollouts`).

Before each group the worker reseeds its sampler from the group's seeds, so what a group samples
depends only on the weights, the task and its seeds: the same on one worker or many, in this
process or on Ray, and after ``--resume``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

import prm_gym  # noqa: F401  (registers prm/ ids)
from prm_gym.agents.chat import DEFAULT_SYSTEM, ChatTemplate
from prm_gym.agents.rollout import Trajectory, rollout, rollout_episodes
from prm_gym.core.errors import ConfigError
from prm_gym.core.policy import SamplingParams
from prm_gym.core.policy_spec import PolicySpec
from prm_gym.envs.remote import RemoteEnv
from prm_gym.rewards.info_gain import CURRENT
from prm_gym.training.config import TreeConfig
from prm_gym.training.group_judges import defer_group_judges, score_deferred
from prm_gym.training.tree import sample_trees
from prm_gym.training.units import RolloutUnit

EVAL_CHUNK = 32
"""Held-out episodes a worker plays side by side in one batched rollout (:meth:`RolloutWorker.evaluate`)."""


def eval_chunks(episodes: Sequence[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """``episodes`` cut into the :data:`EVAL_CHUNK`-sized batches rollout sources hand their workers."""
    return [list(episodes[i : i + EVAL_CHUNK]) for i in range(0, len(episodes), EVAL_CHUNK)]


class Job(NamedTuple):
    """One unit of work: a GRPO group's ``task_id`` and episode ``seeds`` (for a Tree-GRPO job the
    seeds are ``[reset seed, run seed, step]`` and seed the branch points), played in ``env`` (an env
    id of the run; empty: the workers' first env). A plain ``(task_id, seeds)`` pair is a job too."""

    task_id: str
    seeds: Sequence[int]
    env: str = ""


@dataclass(frozen=True)
class ServedAdapter:
    """Published "weights" for workers sampling from vLLM servers that loaded a LoRA adapter: the
    name the servers serve it under, which the workers' requests then ask for."""

    name: str


@dataclass(frozen=True)
class WorkerSpec:
    """What every rollout worker builds.

    Attributes:
        env_id: the registered env id (the first env of a mixture).
        env_kwargs: keyword arguments for ``gym.make`` (or the remote session's env).
        more_envs: the other envs of a mixture: env id -> its ``gym.make`` keyword arguments.
        env_url: a ``prm-serve`` env server: the worker's envs are :class:`RemoteEnv` sessions on it.
        policy: ``hf:<id>`` or ``vllm-engine:<dir>`` (weights published by the learner), or
            ``vllm:<url>[,<url>...]``.
        tokenizer: for a ``vllm:`` policy, the ``hf:`` id whose tokenizer the server speaks.
        served_model: for a ``vllm:`` policy, the served model name.
        imports: modules to import first (third-party envs and judges).
        seed: base seed of the workers' samplers.
        tools_prompt: the chat template's tool block (``auto``, ``full``, ``compact`` or ``native``).
        system_prompt: the system message before the tool block (empty: the default).
        tool_format: the policy's tool-call format (``auto``: read from its tokenizer); the
            worker's envs parse the format its chat template resolves.
        sample_dtype: an ``hf:`` policy samples from a copy of its weights in this dtype (``--precision``).
        group_judges: score group-batched judges (IGPO's ``progress/info_gain``) once per GRPO
            group, in one batched call, instead of inside every ``env.step``
            (:mod:`prm_gym.training.group_judges`); the rewards are the same.
        eval_envs: per env id, the ``gym.make`` keyword arguments of its held-out evaluation
            (:meth:`RolloutWorker.evaluate`).
    """

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    more_envs: dict[str, dict[str, Any]] = field(default_factory=dict)
    env_url: str = ""
    policy: str = "hf:tiny"
    tokenizer: str = "hf:tiny"
    served_model: str = "policy"
    imports: tuple[str, ...] = ()
    seed: int = 0
    tools_prompt: str = "full"
    system_prompt: str = ""
    sample_dtype: str | None = None
    group_judges: bool = True
    tool_format: str = "hermes"
    eval_envs: dict[str, dict[str, Any]] = field(default_factory=dict)


def build_policy(spec: WorkerSpec, seed: int) -> Any:
    """The policy a worker samples from."""
    policy = PolicySpec.parse(spec.policy)
    if policy.kind == "vllm":
        return policy.load(seed, tokenizer=spec.tokenizer, served_model=spec.served_model)
    if policy.kind == "hf":
        return policy.load(seed, sample_dtype=spec.sample_dtype)
    return policy.load(seed)


def group_seed(seeds: Sequence[int], base: int) -> int:
    """The sampler seed of the group (or tree job) with these episode ``seeds`` in run ``base``."""
    return int(np.random.SeedSequence([base, *(int(s) % 2**63 for s in seeds)]).generate_state(1)[0])


def _portable(trajs: list[Trajectory], env_id: str) -> list[Trajectory]:
    """``trajs``, tagged with their env id, with only plain values left in their turns' infos (sent
    to another process)."""
    for t in trajs:
        t.env_id = env_id
        for turn in t.turns:
            turn.info = {k: v for k, v in turn.info.items() if isinstance(v, (int, float, str, bool, dict))}
    return trajs


def _forget(policy: Any) -> None:
    """Drop what a sampler keeps for an episode's next turn (an HF policy's KV caches), once its
    episodes are over, so the learner step that follows has the memory."""
    forget = getattr(policy, "forget", None)
    if forget is not None:
        forget()


def _current_judges(kwargs: dict[str, Any]) -> list[str]:
    """The judge ids whose ``judge_kwargs`` ask for ``policy="current"``."""
    judges = kwargs.get("judge_kwargs") or {}
    return [j for j, kw in judges.items() if isinstance(kw, dict) and kw.get("policy") == CURRENT]


def bind_current_policy(kwargs: dict[str, Any], policy: Any) -> dict[str, Any]:
    """``kwargs`` with every judge's ``policy="current"`` replaced by ``policy``, the object this worker
    samples with: a judge that reads the policy's own belief (IGPO's ``progress/info_gain``, as its
    authors run it) then reads the weights being trained (in a synchronous in-process run the
    learner's model itself; otherwise the worker's copy at the version it samples with).

    Raises:
        ConfigError: a judge asks for ``"current"`` but the policy has no in-process model (vLLM).
    """
    names = _current_judges(kwargs)
    if not names:
        return kwargs
    if not (hasattr(policy, "model") and hasattr(policy, "tokenizer")):
        raise ConfigError(
            f"judge policy 'current' ({', '.join(names)}) needs an in-process transformers policy (hf:...); "
            f"this worker samples with {type(policy).__name__}."
        )
    judges = {j: ({**kw, "policy": policy} if j in names else kw) for j, kw in kwargs["judge_kwargs"].items()}
    return {**kwargs, "judge_kwargs": judges}


class RolloutWorker:
    """One worker: envs + judges + sandboxes + a policy; plays whole GRPO groups."""

    def __init__(self, spec: WorkerSpec, index: int, policy: Any = None):
        for module in spec.imports:
            importlib.import_module(module)
        self.spec = spec
        self.index = index
        self.policy = policy if policy is not None else build_policy(spec, seed=spec.seed * 1000 + index + 1)
        system = spec.system_prompt or DEFAULT_SYSTEM
        self.chat = ChatTemplate(
            self.policy.tokenizer, system, tools_block=spec.tools_prompt, tool_format=spec.tool_format
        )
        self.envs: dict[str, list[Any]] = {}  # per env id: the envs a group plays in, reused across groups
        self.eval_envs: dict[str, list[Any]] = {}  # the same for held-out evaluation

    def make_env(self, env_id: str = "", held_out: bool = False) -> gym.Env[str, str]:
        """A new env of ``env_id`` (empty: the spec's first env; ``held_out``: with its evaluation
        kwargs): ``gym.make``, or a session on the env server when the spec names one."""
        env_id = env_id or self.spec.env_id
        if held_out:
            kwargs = self.chat.env_kwargs(self.spec.eval_envs[env_id])
        else:
            kwargs = self.chat.env_kwargs(
                self.spec.env_kwargs if env_id == self.spec.env_id else self.spec.more_envs[env_id]
            )
        if self.spec.env_url:
            if _current_judges(kwargs):
                raise ConfigError("judge policy 'current' cannot reach an env server; run the envs in-process.")
            return RemoteEnv(self.spec.env_url, env_id=env_id, env_kwargs=kwargs)
        return gym.make(env_id, **bind_current_policy(kwargs, self.policy))

    def ping(self) -> int:
        return os.getpid()

    def set_weights(self, state: Any, version: int) -> int:
        """Load published weights (``None`` for a vLLM server policy: only the version moves; a
        :class:`ServedAdapter`: the servers' new LoRA adapter is requested from now on)."""
        if isinstance(state, ServedAdapter):
            self.policy.served = state.name
        elif state is not None and hasattr(self.policy, "load_weights"):  # an in-process vLLM engine
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
        env: str = "",
    ) -> RolloutUnit:
        """One group: ``len(seeds)`` episodes of ``task_id`` in ``env`` (empty: the spec's first env);
        with ``tree``, that task's Tree-GRPO trees instead (reset seed ``seeds[0]``, branch points
        drawn from a generator seeded by ``seeds``). Either way one :class:`prm_gym.training.units.RolloutUnit`.
        Every trajectory's ``env_id`` names its env."""
        env = env or self.spec.env_id
        reseed = getattr(self.policy, "reseed", None)
        if reseed is not None:
            reseed(group_seed(seeds, self.spec.seed))
        try:
            if tree is not None:
                return self._play_tree(env, task_id, seeds, sampling, max_context_tokens, tree)
            return self._play_chains(env, task_id, seeds, sampling, max_context_tokens)
        finally:
            _forget(self.policy)  # the group's episodes are over: their kept KV caches are of no more use

    def _play_chains(
        self, env: str, task_id: str, seeds: Sequence[int], sampling: SamplingParams, max_context_tokens: int
    ) -> RolloutUnit:
        envs = self.envs.setdefault(env, [])
        while len(envs) < len(seeds):
            made = self.make_env(env)
            if self.spec.group_judges:
                defer_group_judges(made)
            envs.append(made)
        trajs = rollout(
            envs[: len(seeds)],
            self.policy,
            self.chat,
            seeds=list(seeds),
            task_ids=[task_id] * len(seeds),
            sampling=sampling,
            max_context_tokens=max_context_tokens,
        )
        score_deferred(envs[: len(seeds)], trajs)  # IGPO & co: the whole group in one call
        return RolloutUnit.chain(_portable(trajs, env))

    def _play_tree(
        self,
        env: str,
        task_id: str,
        seeds: Sequence[int],
        sampling: SamplingParams,
        max_context_tokens: int,
        tree: TreeConfig,
    ) -> RolloutUnit:
        sample = sample_trees(
            lambda: self.make_env(env),
            self.policy,
            self.chat,
            [task_id],
            [seeds[0]],
            tree,
            np.random.default_rng(list(seeds)),
            sampling=sampling,
            max_context_tokens=max_context_tokens,
        )
        _portable(sample.leaves, env)
        return sample

    def evaluate(
        self,
        env_id: str,
        episodes: Sequence[tuple[str, int]],
        sampling: SamplingParams,
        max_context_tokens: int,
    ) -> list[Trajectory]:
        """Held-out episodes ``(task_id, reset seed)`` of ``env_id``, played side by side in one
        batched rollout (tasks mixed, so sampling batches across them) with the env's evaluation
        kwargs. The sampler is reseeded from the episodes' seeds, so the result depends only on
        the weights and the episodes, not on which worker played them or what it played before."""
        reseed = getattr(self.policy, "reseed", None)
        if reseed is not None:
            reseed(group_seed([-1, *(s for _, s in episodes)], self.spec.seed))
        envs = self.eval_envs.setdefault(env_id, [])
        while len(envs) < len(episodes):
            envs.append(self.make_env(env_id, held_out=True))
        try:
            trajs = rollout_episodes(envs, self.policy, self.chat, episodes, sampling, max_context_tokens)
        finally:
            _forget(self.policy)
        return _portable(trajs, env_id)

    def drop_envs(self) -> None:
        """Close this worker's envs (after an infrastructure failure the next group builds new ones)."""
        for pool in (self.envs, self.eval_envs):
            for envs in pool.values():
                for e in envs:
                    e.close()
            pool.clear()

    def close(self) -> None:
        self.drop_envs()


@dataclass
class CollectStats:
    """What one ``collect`` call of a rollout source survived."""

    worker_deaths: int = 0
    retried_groups: int = 0
    dropped_groups: int = 0

    def add(self, other: CollectStats) -> None:
        for k, v in other.__dict__.items():
            setattr(self, k, getattr(self, k) + v)

    def as_metrics(self) -> dict[str, float]:
        return {f"rollout/{k}": float(v) for k, v in self.__dict__.items()}
