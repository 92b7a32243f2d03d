"""``train-agent --backend ray`` / ``--policy vllm:<url>|vllm-engine:<dir>``: the loop with other samplers.

The maths and the learner are the in-process trainer's (:func:`prm_gym.training.trainer.learner_step`,
:func:`prm_gym.training.batch.build_batch`, the same task and seed schedule): only where episodes are
played changes. Rollouts run on :class:`prm_gym.training.distributed.RayRollouts` workers (or in this
process for ``--backend local``), sampling from published ``hf:`` weights, from vLLM servers
that reload the learner's weights after every step, or from an in-process vLLM engine
(``vllm-engine:<dir>``) into which the learner's tensors are copied after every step.

With ``--asynchronous.enabled`` (``hf:`` policies, ``max_staleness >= 1``) the next step's groups
are played while the learner trains on this step's: a background thread runs the next
``collect`` as soon as this one returns, so a batch lags the learner by at most one version and
the truncated IS correction (from the recorded behaviour log-probs) covers the lag. Each
worker takes new weights between groups, never inside one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from prm_gym.agents.rollout import Trajectory
from prm_gym.core.errors import ConfigError
from prm_gym.core.policy import SamplingParams
from prm_gym.training.asyncrl import StalenessReport, admit
from prm_gym.training.batch import Grouping, flatten_groups
from prm_gym.training.config import TrainConfig, TreeConfig
from prm_gym.training.distributed import CollectStats, RayRollouts, RolloutWorker, WorkerSpec
from prm_gym.training.tree import merge_samples


class LocalRollouts:
    """The :class:`RayRollouts` interface in this process (one worker, no Ray)."""

    def __init__(self, spec: WorkerSpec):
        self.worker = RolloutWorker(spec, 0)
        self._lock = threading.Lock()  # held while a group plays: new weights land between groups
        self._slot = threading.Lock()  # guards _pending, the newest weights not yet loaded
        self._cancel = threading.Event()
        self._pending: tuple[Any, int] | None = None

    def publish(self, state: Any, version: int, *, wait: bool = True) -> None:
        """New weights now (after a playing group), or with ``wait=False`` before the next group."""
        if not wait:
            with self._slot:
                self._pending = (state, version)
            return
        with self._lock:
            with self._slot:
                self._pending = None
            self.worker.set_weights(state, version)

    def collect(
        self,
        groups: Sequence[tuple[str, Sequence[int]]],
        sampling: SamplingParams,
        max_context_tokens: int,
        tree: TreeConfig | None = None,
    ) -> tuple[list[Any], CollectStats]:
        out = []
        for task_id, seeds in groups:
            if self._cancel.is_set():
                break
            with self._lock:
                with self._slot:
                    pending, self._pending = self._pending, None
                if pending is not None:
                    self.worker.set_weights(*pending)
                out.append(self.worker.play(task_id, seeds, sampling, max_context_tokens, tree))
        return out, CollectStats()

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        self.worker.close()


def worker_spec(cfg: TrainConfig) -> WorkerSpec:
    """What each rollout worker builds for ``cfg``."""
    return WorkerSpec(
        env_id=cfg.env,
        env_kwargs=cfg.env_kwargs_dict,
        policy=cfg.policy,
        tokenizer=cfg.vllm_weights or cfg.policy,
        imports=cfg.imports,
        seed=cfg.seed,
        tools_prompt=cfg.tools_prompt,
        served_model=cfg.vllm_weights[3:] if cfg.policy.startswith("vllm:") else "policy",
    )


def learner_policy(cfg: TrainConfig) -> str:
    """The ``hf:`` id the learner trains: the served weights for ``vllm:``/``vllm-engine:`` policies."""
    if cfg.policy.startswith("vllm-engine:"):
        if cfg.backend == "ray":
            raise ConfigError("--policy vllm-engine: runs vLLM in this process; use --backend local (or vllm:<url>).")
        return "hf:" + cfg.policy[len("vllm-engine:") :]
    return cfg.vllm_weights if cfg.policy.startswith("vllm:") else cfg.policy


def _push_weights(run: Any, pool: Any, server: Any, cfg: TrainConfig, *, wait: bool = True) -> None:
    """After a learner step: the workers' (or the vLLM servers') weights become the learner's
    (``wait=False``, async: workers busy with the next step's groups take them after their group)."""
    if server is None and cfg.policy.startswith("vllm-engine:"):
        pool.publish(run.policy.model.state_dict(), run.policy.version)  # the engine copies them, on their device
        return
    if server is None:
        state = {k: v.detach().cpu().clone() for k, v in run.policy.model.state_dict().items()}
        pool.publish(state, run.policy.version, wait=wait)
        return
    run.policy.model.save_pretrained(cfg.vllm_weights[3:])
    server.reload_weights(version=run.policy.version)
    pool.publish(None, run.policy.version)


def train_distributed(cfg: TrainConfig) -> Any:
    """Train with rollouts on Ray workers and/or vLLM servers; returns the trainer's ``Run``."""
    from prm_gym.training.batch import build_batch
    from prm_gym.training.ddp import setup_learner
    from prm_gym.training.trainer import build_run, checkpoint, checkpoint_due, learner_step, reward_metrics, step_tasks

    a = cfg.asynchronous
    vllm = cfg.policy.startswith("vllm:")
    run = build_run(replace(cfg, policy=learner_policy(cfg)))
    learner = setup_learner(run)  # torchrun (WORLD_SIZE > 1): DDP; rank 0 alone drives rollouts and writes
    spec = worker_spec(cfg)
    pool: Any = None
    if learner.is_main:
        pool = RayRollouts(spec, cfg.num_workers, address=cfg.ray_address) if cfg.backend == "ray" else None
        pool = pool or LocalRollouts(spec)
    server = None
    if vllm and learner.is_main:
        from prm_gym.agents.vllm import VLLMPolicy

        server = VLLMPolicy(cfg.policy[5:].split(","), run.policy.tokenizer, model=spec.served_model)
    log = learner.metrics_log(cfg.output_dir, cfg.tensorboard, keep_until=run.step if cfg.resume else None)
    collect = _collector(pool, cfg, run, step_tasks)
    # async: one thread plays the next step's groups while the learner trains on this step's
    prefetch = ThreadPoolExecutor(1, "prm-next-rollouts") if a.enabled and a.max_staleness >= 1 else None
    ahead: Future[tuple[list[Any], CollectStats]] | None = None
    try:
        if pool is not None and server is None:
            _push_weights(run, pool, None, cfg)
        elif pool is not None:
            pool.publish(None, run.policy.version)
        while run.step < cfg.steps:
            t0 = time.perf_counter()
            report = StalenessReport()
            if learner.is_main:
                groups, stats = ahead.result() if ahead is not None else collect(run.step)
                ahead = prefetch.submit(collect, run.step + 1) if prefetch and run.step + 1 < cfg.steps else None
                if cfg.algo == "grpo":  # (tree-grpo runs synchronously: nothing is stale)
                    groups = admit(groups, run.policy.version, a.max_staleness, a.stale, report)
            else:
                groups, stats = [], CollectStats()
            groups, stats, report = learner.broadcast((groups, stats, report))
            trajs, grouping, extra = _as_batch(groups, cfg.algo == "tree-grpo")
            t1 = time.perf_counter()
            report.wait_s = t1 - t0  # the learner's wait for this step's groups (async: what overlap left)
            values: dict[str, float] = {**stats.as_metrics(), **report.as_metrics(), **extra, "rollout_s": t1 - t0}
            if trajs:
                batch = build_batch(
                    trajs,
                    grouping,
                    cfg.loss,
                    pad_id=run.policy.tokenizer.pad_token_id or 0,
                    combine=run.combine,
                    max_new_tokens=cfg.sampling.max_new_tokens,
                )
                temp = cfg.sampling.temperature
                values.update(
                    learner_step(
                        learner.model,
                        learner.optimizer,
                        learner.to_device(batch),
                        cfg.loss,
                        ref=run.ref,
                        temperature=temp,
                    )
                )
                values.update({**reward_metrics(trajs), **batch.stats})
                run.policy.version += 1
                learner.after_step(run, checkpoint_due=checkpoint_due(cfg, run.step + 1))
                if learner.is_main:
                    _push_weights(run, pool, server, cfg, wait=prefetch is None)
            run.step += 1
            values["learn_s"] = time.perf_counter() - t1
            log.log(run.step, values)
            if cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0 and learner.is_main:
                checkpoint(run)
    finally:
        if prefetch is not None:  # an early exit: the next step's collect stops within a second
            if pool is not None:
                pool.cancel()
            prefetch.shutdown(wait=True, cancel_futures=True)
        if pool is not None:
            pool.close()
    if learner.is_main:
        checkpoint(run)
    log.close()
    learner.close()
    return run


def _collector(
    pool: Any, cfg: TrainConfig, run: Any, step_tasks: Callable[..., list[tuple[str, int]]]
) -> Callable[[int], tuple[list[Any], CollectStats]]:
    """``step -> (results, stats)``: play that step's GRPO groups or trees (the in-process trainer's
    task schedule)."""

    tree = cfg.tree if cfg.algo == "tree-grpo" else None

    def collect(step: int) -> tuple[list[Any], CollectStats]:
        pairs = step_tasks(cfg, run.train_ids, step, cfg.tasks_per_step)
        if tree is not None:  # one job per task: its trees, branch points seeded by (task seed, run seed, step)
            jobs = [(t, [s, cfg.seed, step]) for t, s in pairs]
        else:  # one job per GRPO group
            jobs = [(t, [s + j for j in range(cfg.group_size)]) for t, s in pairs]
        result: tuple[list[Any], CollectStats] = pool.collect(jobs, run.sampling, cfg.sampling.max_context_tokens, tree)
        return result

    return collect


def _as_batch(results: list[Any], trees: bool) -> tuple[list[Trajectory], Grouping, dict[str, float]]:
    """A step's trajectories, their grouping and its sampling budget: from GRPO groups, or from
    each task's :class:`prm_gym.training.tree.TreeSample` (merged, indices renumbered)."""
    return merge_samples(results).as_batch() if trees else flatten_groups(results)
