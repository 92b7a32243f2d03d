"""Held-out evaluation: mean reward with its standard error, success rate, pass@k and maj@k,
overall, per difficulty level and per env.

Definitions (docs/training.md, "Evaluation"):

* an episode *succeeds* when its outcome return reaches ``--eval.success-threshold`` (the terms the
  training judges declare outcome; where ``--eval.env-kwargs`` gives the held-out envs a judge
  without those terms, the terms that judge declares outcome);
* ``pass@k`` is the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` over a task's ``n`` scored
  samples with ``c`` successes (Chen et al. 2021), averaged over tasks; a task with fewer than
  ``k`` scored samples uses ``k = n``;
* ``maj@k``: the first ``k`` scored samples of a task vote with their final answers (the last
  turn's ``info["answer"]``, whitespace collapsed; a sample with no answer does not vote); the
  most frequent answer wins, a tie going to the answer given first; the task counts as solved
  when the first sample that gave the winning answer succeeded (no answer at all: unsolved);
* episodes with a turn flagged ``infra_error`` are left out of every denominator and counted in
  ``infra_error_episodes``.

Every key also comes per difficulty (``pass@4/level=2``, from ``task.meta["level"]``) and per env
(``pass@4/env=prm/Math-v0``: in a mixture the env each task was played in; otherwise
``task.meta["env"]`` or the run's env id). A mixture evaluates the first ``--eval.num-tasks``
held-out tasks of each of its envs.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.hf import HFPolicy
from prm_gym.agents.rollout import Trajectory, rollout_episodes
from prm_gym.core.policy import ChatPolicy, Policy, SamplingParams
from prm_gym.core.progress import bar
from prm_gym.core.seams import trainer_env
from prm_gym.training.batch import outcome_and_process
from prm_gym.training.config import TrainConfig
from prm_gym.training.mixture import task_key
from prm_gym.training.run import env_factory
from prm_gym.training.worker import eval_chunks


@dataclass(frozen=True)
class EvalSample:
    """One evaluation episode, as the report counts it."""

    task_id: str
    reward: float
    success: bool
    answer: str | None = None
    infra_error: bool = False


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` successes: ``1 - C(n-c, k) / C(n, k)``."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def final_answer(traj: Trajectory) -> str | None:
    """The episode's final answer (last turn's ``info["answer"]``, whitespace collapsed), or None."""
    if not traj.turns:
        return None
    answer = traj.turns[-1].info.get("answer")
    text = " ".join(str(answer).split()) if answer is not None else ""
    return text or None


def majority_solved(samples: Sequence[EvalSample]) -> bool:
    """Whether the majority answer of ``samples`` is right (ties: the answer given first)."""
    votes = Counter(s.answer for s in samples if s.answer is not None)
    if not votes:
        return False
    top = max(votes.values())
    first = next(s for s in samples if s.answer is not None and votes[s.answer] == top)
    return first.success


def summarise(
    rewards: Mapping[str, list[float]],
    wins: Mapping[str, int],
    k: int | Sequence[int],
    infra: int,
    votes: Mapping[str, Sequence[EvalSample]] | None = None,
) -> dict[str, float]:
    """Reward (mean over tasks, with its standard error), success and pass@k for each ``k``
    (an int ``k``: 1 and ``k``) over the episodes that were scored, and maj@k from ``votes`` (each
    task's scored samples in order) when given; ``infra_error_episodes`` counts the ones left out."""
    ks = sorted({1, int(k)}) if isinstance(k, int) else sorted(set(k))
    scored = [t for t in rewards if rewards[t]]
    out: dict[str, float] = {"infra_error_episodes": float(infra), "tasks_scored": float(len(scored))}
    if not scored:
        return out
    per_task = np.array([np.mean(rewards[t]) for t in scored])
    out["reward"] = float(per_task.mean())
    out["reward_se"] = float(per_task.std(ddof=1) / math.sqrt(len(scored))) if len(scored) > 1 else 0.0
    out["success"] = float(np.mean([wins[t] / len(rewards[t]) for t in scored]))
    for kk in ks:
        out[f"pass@{kk}"] = float(
            np.mean([pass_at_k(len(rewards[t]), wins[t], min(kk, len(rewards[t]))) for t in scored])
        )
    if votes is not None:
        for kk in ks:
            out[f"maj@{kk}"] = float(np.mean([majority_solved(list(votes[t])[:kk]) for t in scored]))
    return out


def score(samples: Sequence[EvalSample], ks: Sequence[int]) -> dict[str, float]:
    """:func:`summarise` of these samples (in sample order per task)."""
    rewards: dict[str, list[float]] = {}
    wins: dict[str, int] = {}
    votes: dict[str, list[EvalSample]] = {}
    infra = 0
    for s in samples:
        rewards.setdefault(s.task_id, [])
        wins.setdefault(s.task_id, 0)
        votes.setdefault(s.task_id, [])
        if s.infra_error:  # not the agent's: out of every denominator, and counted
            infra += 1
            continue
        rewards[s.task_id].append(s.reward)
        wins[s.task_id] += int(s.success)
        votes[s.task_id].append(s)
    return summarise(rewards, wins, ks, infra, votes)


def report(
    samples: Sequence[EvalSample], ks: Sequence[int], groups: Mapping[str, Mapping[str, Any]]
) -> dict[str, float]:
    """:func:`score` over all samples, then per group: ``groups[task_id]`` maps a dimension
    (``level``, ``env``) to the task's value; keys come out as ``pass@4/level=2``."""
    out = score(samples, ks)
    dims = sorted({d for g in groups.values() for d in g})
    for dim in dims:
        values = sorted({str(g[dim]) for g in groups.values() if g.get(dim) is not None})
        for value in values:
            part = [s for s in samples if str(groups.get(s.task_id, {}).get(dim)) == value]
            out.update({f"{key}/{dim}={value}": v for key, v in score(part, ks).items()})
    return out


class Episodes(Protocol):
    """Plays held-out ``(task_id, seed)`` episodes of an env; a rollout source is one
    (:meth:`prm_gym.training.sources.RolloutSource.evaluate`)."""

    def evaluate(
        self, env_id: str, episodes: Sequence[tuple[str, int]], sampling: SamplingParams, max_context_tokens: int
    ) -> list[Trajectory]: ...


class InProcess:
    """:class:`Episodes` played here with ``policy``, in the rollout workers' chunks
    (:func:`prm_gym.training.worker.eval_chunks`: tasks mixed, so sampling batches across them),
    each env built once and reused."""

    def __init__(self, policy: Policy | ChatPolicy, chat: ChatTemplate, cfg: TrainConfig):
        self.policy, self.chat, self.cfg = policy, chat, cfg
        self.envs: dict[str, list[Any]] = {}

    def evaluate(
        self, env_id: str, episodes: Sequence[tuple[str, int]], sampling: SamplingParams, max_context_tokens: int
    ) -> list[Trajectory]:
        envs = self.envs.setdefault(env_id, [])
        make = env_factory(env_id, self.chat.env_kwargs(self.cfg.eval_env_kwargs_for(env_id)), self.cfg.env_url)
        out: list[Trajectory] = []
        for part in eval_chunks(episodes):
            while len(envs) < len(part):
                envs.append(make())
            out += rollout_episodes(envs, self.policy, self.chat, part, sampling, max_context_tokens)
        return out

    def close(self) -> None:
        for envs in self.envs.values():
            for env in envs:
                env.close()
        self.envs.clear()


def evaluate(
    policy: Policy | ChatPolicy, chat: ChatTemplate, cfg: TrainConfig, source: Episodes | None = None
) -> dict[str, float]:
    """Play ``cfg.eval.samples`` episodes on each of the first ``cfg.eval.num_tasks`` held-out
    tasks (of each env, in a mixture) and :func:`report` them (``--eval.k``; default: pass@1 and
    pass@samples), overall, per level and per env.

    With ``source`` (the training run's rollout source) the episodes are played by its workers,
    as training episodes are: on Ray actors, vLLM servers or an in-process vLLM engine, in
    parallel. Without it they are played here with ``policy``: an :class:`HFPolicy` samples with
    its own RNG (seeded from ``cfg.seed``), so evaluating never changes the training run's random
    stream; any other policy (a vLLM one, a FakePolicy) is used as it is. With ``--env-url`` the
    episodes are played on the env server. ``episodes_per_s``: episodes played per second of the
    whole evaluation (envs, sampling, scoring).
    """
    local: InProcess | None = None
    if source is None:
        sampler: Policy | ChatPolicy = policy
        if isinstance(policy, HFPolicy):
            seed, dtype, reuse = cfg.seed + 7919, policy.sample_dtype, policy.reuse_prefixes
            sampler = HFPolicy(policy.model, policy.tokenizer, policy.version, seed, dtype, reuse_prefixes=reuse)
        source = local = InProcess(sampler, chat, cfg)
    samples: list[EvalSample] = []
    groups: dict[str, dict[str, Any]] = {}
    start = time.perf_counter()
    try:
        for env_id in cfg.env_ids:
            env_samples, env_groups = _evaluate_env(source, chat, cfg, env_id)
            samples += env_samples
            groups.update(env_groups)
    finally:
        if local is not None:
            local.close()
    seconds = time.perf_counter() - start
    out = report(samples, cfg.eval.k or (1, cfg.eval.samples), groups)
    out["episodes_per_s"] = len(samples) / max(seconds, 1e-9)
    return out


def _evaluate_env(
    source: Episodes, chat: ChatTemplate, cfg: TrainConfig, env_id: str, per_call: int = 128
) -> tuple[list[EvalSample], dict[str, dict[str, Any]]]:
    """The samples of one env's held-out tasks, keyed by task id (by env and task id in a mixture),
    and each task's report groups. ``per_call`` episodes go to the source at a time (the progress bar
    moves between calls)."""
    e, mixed = cfg.eval, len(cfg.env_ids) > 1
    probe = env_factory(env_id, chat.env_kwargs(cfg.eval_env_kwargs_for(env_id)), cfg.env_url)()
    try:
        base = trainer_env(probe, where="eval.env_kwargs")
        tasks, kinds = base.tasks, dict(base.reward_kinds)
        ids = tasks.ids[: e.num_tasks]
        metas = {tid: tasks.get(tid).meta for tid in ids}
    finally:
        probe.close()
    # success reads the outcome terms of the training judges, or, where the held-out envs judge with
    # other terms (--eval.env-kwargs '{"judge": ...}'), the terms those judges declare outcome
    outcome_terms = cfg.loss.outcome_terms
    if not set(outcome_terms) & set(kinds):
        outcome_terms = tuple(term for term, kind in kinds.items() if kind == "outcome")
    key = {tid: task_key(env_id, tid) if mixed else tid for tid in ids}
    groups = {key[tid]: _groups(meta, env_id, mixed) for tid, meta in metas.items()}
    params = SamplingParams(max_new_tokens=cfg.sampling.max_new_tokens, temperature=e.temperature)
    jobs = [(tid, 10_000 + j) for tid in ids for j in range(e.samples)]
    samples: list[EvalSample] = []
    with bar(len(jobs), "eval", "episode", enabled=cfg.progress, delay=0.0) as progress:
        for lo in range(0, len(jobs), per_call):
            part = jobs[lo : lo + per_call]
            trajs = source.evaluate(env_id, part, params, cfg.sampling.max_context_tokens)
            for (tid, _), traj in zip(part, trajs, strict=True):
                outcome, _ = outcome_and_process(traj, outcome_terms)
                success = outcome >= e.success_threshold
                samples.append(EvalSample(key[tid], traj.total_reward, success, final_answer(traj), traj.infra_error))
            progress.update(len(part))
    return samples, groups


def _groups(meta: Mapping[str, Any], env_id: str, mixed: bool = False) -> dict[str, Any]:
    """A task's report groups: its level, and its env (in a mixture the env it was played in,
    otherwise ``task.meta["env"]`` or the run's env id)."""
    out: dict[str, Any] = {"env": env_id if mixed else meta.get("env") or env_id}
    if meta.get("level") is not None:
        out["level"] = meta["level"]
    return out
