"""The training loop: collect groups (or trees), compute advantages, take a clipped PG step.

Read :func:`train` top to bottom: build the policy, envs and optimiser; every step pick tasks,
collect trajectories (synchronously, from async producers, or as Tree-GRPO trees), turn them
into a :class:`prm_gym.training.batch.Batch`, call :func:`learner_step`, log, checkpoint.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import Trajectory, rollout
from prm_gym.core.errors import ConfigError
from prm_gym.core.hf import HFPolicy
from prm_gym.core.policy import SamplingParams
from prm_gym.rewards.combine import CombineConfig
from prm_gym.training.asyncrl import AsyncCollector, StalenessReport
from prm_gym.training.batch import Batch, Grouping, build_batch, flatten_groups
from prm_gym.training.checkpoint import load_checkpoint, model_state, save_checkpoint
from prm_gym.training.config import LossConfig, TrainConfig
from prm_gym.training.ddp import rank_chunks, reduce_stats, setup_learner
from prm_gym.training.evaluation import evaluate
from prm_gym.training.fsdp import scalar
from prm_gym.training.losses import policy_loss, token_logprobs, truncated_is_weights
from prm_gym.training.metrics import Progress, plot_metrics
from prm_gym.training.recipe_loop import collect_recipes, make_tracker
from prm_gym.training.tree import sample_trees


def env_factory(env_id: str, kwargs: dict[str, Any]) -> Callable[[], gym.Env]:
    """A function building ``gym.make(env_id, **kwargs)``; checks the id once."""
    import prm_gym  # noqa: F401  (registers prm/ ids)

    if env_id not in gym.registry:
        known = ", ".join(sorted(k for k in gym.registry if k.startswith("prm/")))
        raise ConfigError(f"env={env_id!r} is not registered; known prm ids: {known}.")
    return lambda: gym.make(env_id, **kwargs)


def task_ids_of(env: gym.Env, where: str) -> list[str]:
    tasks = getattr(env.unwrapped, "tasks", None)
    if tasks is None or not hasattr(tasks, "ids"):
        raise ConfigError(f"{where}: the env has no task set (env.unwrapped.tasks); use a ToolEnv.")
    return list(tasks.ids)


@dataclass
class Run:
    """What a training run holds: config, policy, optimiser, reference, envs, task ids."""

    cfg: TrainConfig
    policy: HFPolicy
    optimizer: torch.optim.Optimizer
    ref: Any
    chat: ChatTemplate
    make_env: Callable[[], gym.Env]
    train_ids: list[str]
    step: int = 0
    combine: CombineConfig | None = None
    """The env judge expression's combination options (after ';'), applied per group."""

    @property
    def sampling(self) -> SamplingParams:
        s = self.cfg.sampling
        return SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature)


def build_run(cfg: TrainConfig) -> Run:
    """Load the policy and optimiser (and the checkpoint when resuming)."""
    policy = HFPolicy.from_id(cfg.policy, seed=cfg.seed)
    if cfg.init_checkpoint:
        policy.model.load_state_dict(model_state(load_checkpoint(cfg.init_checkpoint)))
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    ref = copy.deepcopy(policy.model).eval() if cfg.loss.kl_coef > 0 else None
    make_env = env_factory(cfg.env, cfg.env_kwargs_dict)
    probe = make_env()
    train_ids = task_ids_of(probe, "env")
    spec = getattr(probe.unwrapped, "judge_spec", None)
    combine = spec.combine_config() if spec is not None else None
    probe.close()
    chat = ChatTemplate(policy.tokenizer, tools_block=cfg.tools_prompt)
    run = Run(cfg, policy, optimizer, ref, chat, make_env, train_ids, combine=combine)
    if cfg.resume:
        state = load_checkpoint(cfg.output_dir)
        policy.model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        policy.generator.set_state(state["generator"])
        policy.version, run.step = int(state["version"]), int(state["step"])
        if ref is not None and state.get("ref") is not None:
            ref.load_state_dict(state["ref"])
    return run


def checkpoint(run: Run) -> Path:
    state = {
        "model": run.policy.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "generator": run.policy.generator.get_state(),
        "step": run.step,
        "version": run.policy.version,
        "ref": run.ref.state_dict() if run.ref is not None else None,
        "config": asdict(run.cfg),
    }
    return save_checkpoint(run.cfg.output_dir, state)


def checkpoint_due(cfg: TrainConfig, step: int) -> bool:
    """True when a checkpoint is written after ``step`` (every ``checkpoint_every`` and the last)."""
    return step >= cfg.steps or bool(cfg.checkpoint_every and step % cfg.checkpoint_every == 0)


def step_tasks(cfg: TrainConfig, train_ids: list[str], index: int, count: int) -> list[tuple[str, int]]:
    """``count`` (task id, episode seed) pairs for batch ``index``; deterministic in the index."""
    rng = np.random.default_rng([cfg.seed, index])
    picks = rng.choice(len(train_ids), size=count, replace=len(train_ids) < count)
    return [(train_ids[int(p)], int(rng.integers(2**31 - 1))) for p in picks]


def collect_sync(run: Run, envs: list[gym.Env]) -> tuple[list[Trajectory], Grouping, dict[str, float]]:
    """One step's trajectories from the current policy: GRPO groups or Tree-GRPO trees."""
    cfg = run.cfg
    pairs = step_tasks(cfg, run.train_ids, run.step, cfg.tasks_per_step)
    ctx = cfg.sampling.max_context_tokens
    if cfg.algo == "tree-grpo":
        rng = np.random.default_rng([cfg.seed, run.step, 1])
        sample = sample_trees(
            run.make_env,
            run.policy,
            run.chat,
            [t for t, _ in pairs],
            [s for _, s in pairs],
            cfg.tree,
            rng,
            sampling=run.sampling,
            max_context_tokens=ctx,
        )
        return sample.as_batch()
    g = cfg.group_size
    seeds = [s + j for _, s in pairs for j in range(g)]
    tids = [t for t, _ in pairs for _ in range(g)]
    trajs = rollout(
        envs, run.policy, run.chat, seeds=seeds, task_ids=tids, sampling=run.sampling, max_context_tokens=ctx
    )
    return flatten_groups([trajs[i : i + g] for i in range(0, len(trajs), g)])


def _micro_logprobs(model: Any, ids: torch.Tensor, attn: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = model(input_ids=ids, attention_mask=attn).logits
    if temperature > 0:
        logits = logits / temperature
    return token_logprobs(logits, ids)


def learner_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: LossConfig,
    *,
    ref: Any = None,
    temperature: float = 1.0,
) -> dict[str, float]:
    """``cfg.updates_per_batch`` clipped policy-gradient steps on ``batch`` (micro-batched)."""
    rows = [i for i in range(batch.input_ids.shape[0]) if batch.loss_mask[i].sum() > 0]
    if not rows:
        return {"loss": 0.0, "trained_rows": 0.0}
    model.train()
    chunks = rank_chunks(model, rows, cfg.micro_batch_size)  # (this rank's rows, loss weight); all, 1 in one process
    total_tok = float(batch.loss_mask[rows].sum())
    proximal: dict[int, torch.Tensor] = {}
    if cfg.updates_per_batch > 1:
        with torch.no_grad():
            for c, _ in chunks:
                ids, attn, _ = _slice(batch, c)
                proximal[c[0]] = _micro_logprobs(model, ids, attn, temperature)
    stats: dict[str, float] = {}
    for _ in range(cfg.updates_per_batch):
        optimizer.zero_grad(set_to_none=True)
        stats = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "is_weight": 0.0}
        for c, weight in chunks:
            ids, attn, width = _slice(batch, c)
            mask = batch.loss_mask[c, :width]
            lp = _micro_logprobs(model, ids, attn, temperature)
            old = proximal.get(c[0], lp.detach())[:, :width]
            isw = truncated_is_weights(old, batch.behaviour_logprobs[c, :width], cfg.is_cap)
            ref_lp = None
            if ref is not None:
                with torch.no_grad():
                    ref_lp = _micro_logprobs(ref, ids, attn, temperature)
            loss, st = policy_loss(
                lp,
                old,
                batch.advantages[c, :width],
                mask,
                clip_low=cfg.clip_low,
                clip_high=cfg.clip_high,
                is_weights=isw,
                ref_logprobs=ref_lp,
                kl_coef=cfg.kl_coef,
                aggregation=cfg.aggregation,
            )
            share = (float(mask.sum()) / total_tok if cfg.aggregation == "token-mean" else len(c) / len(rows)) * weight
            (loss * share).backward()
            stats["loss"] += float(loss.detach()) * share
            for k in ("clip_frac", "kl"):
                stats[k] += st[k] * share
            stats["is_weight"] += float((isw * mask).sum()) / total_tok * weight
        stats = reduce_stats(model, stats)
        if cfg.max_grad_norm > 0:
            stats["grad_norm"] = scalar(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
        optimizer.step()
    model.eval()
    stats["trained_rows"] = float(len(rows))
    return stats


def _slice(batch: Batch, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    width = int(batch.attention_mask[rows].sum(-1).max())
    return batch.input_ids[rows, :width], batch.attention_mask[rows, :width], width


def reward_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    out = {"reward": float(np.mean([t.total_reward for t in trajs]))}
    for term in sorted({k for t in trajs for turn in t.turns for k in turn.terms}):
        out[f"reward/{term}"] = float(np.mean([sum(x.terms.get(term, 0.0) for x in t.turns) for t in trajs]))
    out["turns"] = float(np.mean([len(t.turns) for t in trajs]))
    return out


def _make_collector(run: Run) -> AsyncCollector:
    cfg, model, tok = run.cfg, run.policy.model, run.policy.tokenizer

    def make_policy(p: int) -> HFPolicy:
        return HFPolicy(copy.deepcopy(model).eval(), tok, version=run.policy.version, seed=cfg.seed * 1000 + p + 1)

    def load(policy: Any, state: Any, version: int) -> None:
        policy.model.load_state_dict(state)
        policy.version = version

    def next_task(i: int) -> tuple[str, int]:
        return step_tasks(cfg, run.train_ids, i, 1)[0]

    a = cfg.asynchronous
    return AsyncCollector(
        make_policy,
        load,
        run.make_env,
        run.chat,
        next_task,
        group_size=cfg.group_size,
        groups_per_step=cfg.tasks_per_step,
        max_staleness=a.max_staleness,
        producers=a.producers,
        stale=a.stale,
        sampling=run.sampling,
        max_context_tokens=cfg.sampling.max_context_tokens,
        start_version=run.policy.version,
    ).start()


def train(cfg: TrainConfig) -> Run:
    """Train with ``cfg``; metrics, plots, checkpoints and eval results go to ``cfg.output_dir``."""
    run = build_run(cfg)
    learner = setup_learner(run)  # torchrun (WORLD_SIZE > 1): DDP; rank 0 alone logs and writes
    log = learner.metrics_log(cfg.output_dir, cfg.tensorboard, keep_until=run.step if cfg.resume else None)
    if not cfg.resume and learner.is_main:
        log.log(0, {f"eval/{k}": v for k, v in evaluate(run.policy, run.chat, cfg).items()})
    collector = _make_collector(run) if cfg.asynchronous.enabled else None
    envs = [run.make_env() for _ in range(cfg.group_size * cfg.tasks_per_step)]
    tracker = make_tracker(run)
    bar = Progress(cfg.steps, initial=run.step, enabled=cfg.progress and learner.is_main)
    try:
        while run.step < cfg.steps:
            t0 = time.perf_counter()
            report = StalenessReport()
            if collector is not None:
                groups, report = collector.next_batch(run.policy.version)
                trajs, grouping, extra = flatten_groups(groups)
            elif cfg.recipes.sampling_active:
                trajs, grouping, extra = collect_recipes(run, envs, tracker)
            else:
                trajs, grouping, extra = collect_sync(run, envs)
            trajs, grouping, extra = learner.broadcast((trajs, grouping, extra))
            t1 = time.perf_counter()
            batch = build_batch(
                trajs,
                grouping,
                cfg.loss,
                pad_id=run.policy.tokenizer.pad_token_id or 0,
                combine=run.combine,
                max_new_tokens=cfg.sampling.max_new_tokens,
            )
            stats = learner_step(
                learner.model,
                learner.optimizer,
                learner.to_device(batch),
                cfg.loss,
                ref=run.ref,
                temperature=cfg.sampling.temperature,
            )
            run.step += 1
            run.policy.version += 1
            learner.after_step(run, checkpoint_due=checkpoint_due(cfg, run.step))
            if collector is not None:
                state = {k: v.detach().clone() for k, v in run.policy.model.state_dict().items()}
                collector.publish(run.policy.version, state)
            t2 = time.perf_counter()
            values = {
                **reward_metrics(trajs),
                **batch.stats,
                **stats,
                **report.as_metrics(),
                **extra,
                "rollout_s": t1 - t0,
                "learn_s": t2 - t1,
                "tokens_per_s": batch.num_tokens / max(t2 - t0, 1e-9),
                "gen_tokens_per_traj": extra["generated_tokens"] / max(len(trajs), 1),
            }
            if cfg.eval.every and run.step % cfg.eval.every == 0 and run.step < cfg.steps and learner.is_main:
                values.update({f"eval/{k}": v for k, v in evaluate(run.policy, run.chat, cfg).items()})
            log.log(run.step, values)
            bar.update(values)
            if cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0 and learner.is_main:
                checkpoint(run)
    finally:
        bar.close()
        if collector is not None:
            collector.close()
        for e in envs:
            e.close()
    if learner.is_main:
        checkpoint(run)
        log.log(run.step, {f"eval/{k}": v for k, v in evaluate(run.policy, run.chat, cfg).items()})
        plot_metrics(cfg.output_dir)
    log.close()
    learner.close()
    return run
