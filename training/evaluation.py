"""Held-out evaluation: mean reward with its standard error, success rate and pass@k."""

from __future__ import annotations

import math

import numpy as np

from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import rollout
from prm_gym.core.hf import HFPolicy
from prm_gym.core.policy import SamplingParams
from prm_gym.training.batch import outcome_and_process
from prm_gym.training.config import TrainConfig
from prm_gym.training.run import env_factory, task_ids_of


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` successes: ``1 - C(n-c, k) / C(n, k)``."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate(policy: HFPolicy, chat: ChatTemplate, cfg: TrainConfig, chunk: int = 32) -> dict[str, float]:
    """Play ``cfg.eval.samples`` episodes on each of the first ``cfg.eval.num_tasks`` held-out tasks.

    Uses its own sampler RNG (seeded from ``cfg.seed``), so evaluating never changes the
    training run's random stream. Returns ``reward``, ``reward_se`` (standard error over
    tasks), ``success``, ``pass@1`` and ``pass@<n>`` over the episodes that were scored;
    episodes that ended in ``infra_error`` are left out of every denominator and counted in
    ``infra_error_episodes``.
    """
    e = cfg.eval
    make_env = env_factory(cfg.env, cfg.eval_env_kwargs)
    probe = make_env()
    ids = task_ids_of(probe, "eval.env_kwargs")[: e.num_tasks]
    probe.close()
    sampler = HFPolicy(policy.model, policy.tokenizer, version=policy.version, seed=cfg.seed + 7919)
    params = SamplingParams(max_new_tokens=cfg.sampling.max_new_tokens, temperature=e.temperature)
    jobs = [(tid, j) for tid in ids for j in range(e.samples)]
    rewards: dict[str, list[float]] = {tid: [] for tid in ids}
    wins: dict[str, int] = dict.fromkeys(ids, 0)
    infra = 0
    envs = [make_env() for _ in range(min(chunk, len(jobs)))]
    try:
        for lo in range(0, len(jobs), chunk):
            part = jobs[lo : lo + chunk]
            trajs = rollout(
                envs[: len(part)],
                sampler,
                chat,
                seeds=[10_000 + j for _, j in part],
                task_ids=[t for t, _ in part],
                sampling=params,
                max_context_tokens=cfg.sampling.max_context_tokens,
            )
            for (tid, _), traj in zip(part, trajs, strict=True):
                if traj.infra_error:  # not the agent's: out of every denominator, and counted
                    infra += 1
                    continue
                rewards[tid].append(traj.total_reward)
                outcome, _ = outcome_and_process(traj, cfg.loss.outcome_terms)
                wins[tid] += int(outcome >= e.success_threshold)
    finally:
        for env in envs:
            env.close()
    return summarise(rewards, wins, e.samples, infra)


def summarise(rewards: dict[str, list[float]], wins: dict[str, int], k: int, infra: int) -> dict[str, float]:
    """Reward (mean over tasks, with its standard error), success, pass@1 and pass@k over the
    episodes that were scored; ``infra_error_episodes`` counts the ones left out."""
    scored = [t for t in rewards if rewards[t]]
    out: dict[str, float] = {"infra_error_episodes": float(infra), "tasks_scored": float(len(scored))}
    if not scored:
        return out
    per_task = np.array([np.mean(rewards[t]) for t in scored])
    out["reward"] = float(per_task.mean())
    out["reward_se"] = float(per_task.std(ddof=1) / math.sqrt(len(scored))) if len(scored) > 1 else 0.0
    out["success"] = float(np.mean([wins[t] / len(rewards[t]) for t in scored]))
    out["pass@1"] = float(np.mean([pass_at_k(len(rewards[t]), wins[t], 1) for t in scored]))
    out[f"pass@{k}"] = float(np.mean([pass_at_k(len(rewards[t]), wins[t], min(k, len(rewards[t]))) for t in scored]))
    return out
