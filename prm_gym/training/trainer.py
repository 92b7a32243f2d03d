"""THE training loop, for every backend: read :func:`train` top to bottom.

Build the run (learner policy, optimiser, reference, tasks) and its rollout source (in-process,
Ray workers, vLLM servers or an in-process vLLM engine: :mod:`prm_gym.training.sources`). Every
step: take the step's collection (chain groups or trees, with the rollout recipes:
:mod:`prm_gym.training.collect`; played up to ``max_staleness`` steps ahead when asynchronous:
:mod:`prm_gym.training.asyncrl`), admit it by staleness, build the batch (shaped rewards,
advantages, infra-error exclusion), take a learner step, publish the weights, log, evaluate on
schedule (the held-out episodes are played by the same rollout workers), checkpoint. Every
backend therefore gets the same evaluation, progress bar, plots, metric keys, checkpoints and
exclusion accounting.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from functools import partial
from typing import Any

from prm_gym.core.memory import release
from prm_gym.training.asyncrl import Prefetcher, StalenessReport, admit
from prm_gym.training.batch import build_batch
from prm_gym.training.collect import Collected, StepCollector, make_tracker
from prm_gym.training.config import TrainConfig
from prm_gym.training.ddp import setup_learner
from prm_gym.training.evaluation import evaluate
from prm_gym.training.metrics import ExclusionBudget, Progress, env_metrics, plot_metrics, reward_metrics
from prm_gym.training.prime import PrimeCredit
from prm_gym.training.run import Run, build_run, checkpoint, checkpoint_due
from prm_gym.training.sources import learner_config, make_source, weight_publisher
from prm_gym.training.trackers import open_trackers
from prm_gym.training.units import merge_units
from prm_gym.training.update import learner_step


def train(cfg: TrainConfig) -> Run:
    """Train with ``cfg``; metrics, plots, checkpoints and eval results go to ``cfg.output_dir``."""
    run = build_run(learner_config(cfg))
    cfg = replace(cfg, loss=run.cfg.loss)  # with the outcome terms the env's judges declare
    learner = setup_learner(run)  # torchrun (WORLD_SIZE > 1): DDP/FSDP; rank 0 alone plays, logs and writes
    trackers = partial(open_trackers, cfg.report_to, cfg.report_project, cfg.output_dir, asdict(cfg))
    log = learner.metrics_log(cfg.output_dir, cfg.tensorboard, run.step if run.cfg.resume else None, trackers)
    source = make_source(cfg, run.policy) if learner.is_main else None
    a = cfg.asynchronous
    prefetch: Prefetcher[Collected] | None = None
    if source is not None:
        collector = StepCollector(cfg, source, run.train_ids, make_tracker(cfg, run), run.combine)
        prefetch = Prefetcher(collector, a.max_staleness if a.enabled else 0, cfg.steps)
    publish = weight_publisher(cfg, run.policy, source) if source is not None else None
    credit = PrimeCredit(run.policy, cfg.loss) if cfg.loss.prime else None  # PRIME: its own PRM and step
    budget = ExclusionBudget(cfg.max_excluded_fraction)
    bar = Progress(cfg.steps, initial=run.step, enabled=cfg.progress and learner.is_main)
    held_out = partial(evaluate, run.policy, run.chat, cfg, source)  # played by the rollout workers
    try:
        if publish is not None:
            publish(initial=True)
        if not run.cfg.resume and learner.is_main:
            log.log(0, {f"eval/{k}": v for k, v in held_out().items()})
        while run.step < cfg.steps:
            t0 = time.perf_counter()
            report = StalenessReport()
            collected = Collected([])
            if prefetch is not None:
                collected, report.wait_s = prefetch.get(run.step)
                collected.units = admit(collected.units, run.policy.version, a.max_staleness, a.stale, report)
            collected, report = learner.broadcast((collected, report))
            trajs, grouping, extra = merge_units(collected.units).as_batch()
            t1 = time.perf_counter()
            values: dict[str, float] = {**extra, **collected.stats, **report.as_metrics(), "rollout_s": t1 - t0}
            if trajs:
                pad, temp = run.policy.tokenizer.pad_token_id or 0, cfg.sampling.temperature
                batch = build_batch(
                    trajs, grouping, cfg.loss, pad, combine=run.combine, max_new_tokens=cfg.sampling.max_new_tokens
                )
                if credit is not None:
                    values.update(credit.apply(batch, trajs, grouping))
                values.update(reward_metrics(trajs))
                values.update(  # a mixture's reward/success per env
                    env_metrics(trajs, cfg.env_ids, cfg.loss.outcome_terms, cfg.recipes.success_threshold)
                )
                values.update(batch.stats)
                model, opt, bf16 = learner.model, learner.optimizer, cfg.precision == "bf16"
                values.update(
                    learner_step(
                        model, opt, learner.to_device(batch), cfg.loss, ref=run.ref, temperature=temp, autocast=bf16
                    )
                )
                run.policy.version += 1
                opt.zero_grad(set_to_none=True)  # no gradient outlives its step: sampling follows
                release(collect=False)  # the step's freed activations leave the process before sampling resumes
                learner.after_step(run, checkpoint_due=checkpoint_due(cfg, run.step + 1))
                if publish is not None:
                    publish(wait=prefetch is None or prefetch.depth == 0)
                values["tokens_per_s"] = batch.num_tokens / max(time.perf_counter() - t0, 1e-9)
                values["gen_tokens_per_traj"] = values["generated_tokens"] / len(trajs)
            budget.add(trajs, values)
            run.step += 1
            values["learn_s"] = time.perf_counter() - t1
            if cfg.eval.every and run.step % cfg.eval.every == 0 and run.step < cfg.steps and learner.is_main:
                values.update({f"eval/{k}": v for k, v in held_out().items()})
            log.log(run.step, values)
            bar.update(values)
            if cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0 and learner.is_main:
                checkpoint(run)
            budget.check(run.step)
        bar.close()
        if learner.is_main:
            checkpoint(run)
            log.log(run.step, {f"eval/{k}": v for k, v in held_out().items()})
    finally:
        bar.close()
        _close(prefetch, source)
    if learner.is_main:
        plot_metrics(cfg.output_dir)
    log.close()
    learner.close()
    return run


def _close(prefetch: Prefetcher[Any] | None, source: Any) -> None:
    """An early exit cancels the collections played ahead (within a second), then releases the source."""
    try:
        if prefetch is not None:
            prefetch.close(cancel=source.cancel if source is not None else None)
    finally:
        if source is not None:
            source.close()
