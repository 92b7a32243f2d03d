"""Rollout sources: where a step's episodes are played. The loop in :mod:`prm_gym.training.trainer`
talks to every backend through one small interface, :class:`RolloutSource`.

* :class:`LocalRollouts`: ``--num-workers`` :class:`prm_gym.training.worker.RolloutWorker` threads in
  this process (groups whose episodes wait on tools overlap). With a synchronous run they sample
  with the learner's own model (nothing to copy); with an asynchronous one each holds a copy that
  takes published weights between groups.
* :class:`prm_gym.training.distributed.RayRollouts`: workers as Ray actors (``--backend ray``).
* ``--policy vllm:<url>``: either of the above, whose workers sample from vLLM servers; the learner
  writes its weights where the servers read them and asks them to reload (:class:`WeightPublisher`).
* ``--policy vllm-engine:<dir>``: a local worker sampling from an in-process vLLM engine into which
  the learner's tensors are copied after every step.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from prm_gym.agents.hf import HFPolicy
from prm_gym.core.errors import ConfigError, InfraError
from prm_gym.core.models import MODEL_DIR, RUN_STATE
from prm_gym.core.policy import SamplingParams
from prm_gym.core.policy_spec import PolicySpec
from prm_gym.training.config import TrainConfig, TreeConfig
from prm_gym.training.lora import is_lora, merged_state_dict, plain_copy, save_adapter
from prm_gym.training.worker import CollectStats, Job, RolloutWorker, ServedAdapter, WorkerSpec


class RolloutSource(Protocol):
    """Where episodes are played: collect jobs, take new weights, stop early, release everything."""

    def collect(
        self, jobs: Sequence[Job], sampling: SamplingParams, max_context_tokens: int, tree: TreeConfig | None = None
    ) -> tuple[list[Any], CollectStats]:
        """Play ``jobs`` (GRPO groups, or with ``tree`` each task's trees); the finished ones, in order."""
        ...

    def publish(self, state: Any, version: int, *, wait: bool = True) -> None:
        """New weights (``None``: only the version moves); ``wait=False`` lets a busy worker finish its group."""
        ...

    def cancel(self) -> None:
        """Make a ``collect`` running in another thread return soon."""
        ...

    def close(self) -> None:
        """Release workers, envs, sandboxes and servers (idempotent)."""
        ...


class LocalRollouts:
    """A :class:`RolloutSource` with workers in this process: one thread each, a free worker takes
    the next job (as Ray's workers do), results come back in job order.

    Args:
        spec: what the workers build.
        policies: one entry per worker: the policy it samples with, or ``None`` to build one from
            ``spec`` (a synchronous run passes the learner's model, so publishing moves only the
            version).
    """

    def __init__(self, spec: WorkerSpec, policies: Sequence[Any] = (None,)):
        self.workers = [RolloutWorker(spec, i, policy=p) for i, p in enumerate(policies)]
        self._locks = [threading.Lock() for _ in self.workers]  # held while a group plays
        self._slot = threading.Lock()  # guards _pending: per worker, the newest weights not yet loaded
        self._pending: list[tuple[Any, int] | None] = [None] * len(self.workers)
        self._cancel = threading.Event()

    def publish(self, state: Any, version: int, *, wait: bool = True) -> None:
        if not wait:  # each worker loads them before its next group
            with self._slot:
                self._pending = [(state, version)] * len(self.workers)
            return
        for w, worker in enumerate(self.workers):
            with self._locks[w]:
                with self._slot:
                    self._pending[w] = None
                worker.set_weights(state, version)

    def collect(
        self, jobs: Sequence[Job], sampling: SamplingParams, max_context_tokens: int, tree: TreeConfig | None = None
    ) -> tuple[list[Any], CollectStats]:
        todo = iter(enumerate(jobs))
        take = threading.Lock()
        results: dict[int, Any] = {}
        stats = CollectStats()

        def drive(w: int) -> None:
            worker = self.workers[w]
            while not self._cancel.is_set():
                with take:
                    nxt = next(todo, None)
                if nxt is None:
                    return
                i, job = nxt
                task_id, seeds, env = Job(*job)
                with self._locks[w]:
                    with self._slot:
                        pending, self._pending[w] = self._pending[w], None
                    if pending is not None:
                        worker.set_weights(*pending)
                    try:
                        results[i] = worker.play(task_id, seeds, sampling, max_context_tokens, tree, env)
                    except InfraError:  # an env backend died outside an episode's turns: drop the group
                        with take:
                            stats.dropped_groups += 1
                        worker.drop_envs()

        if len(self.workers) == 1:
            drive(0)
        else:
            with ThreadPoolExecutor(len(self.workers), "prm-local-worker") as pool:
                list(pool.map(drive, range(len(self.workers))))
        return [results[i] for i in sorted(results)], stats

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


def worker_spec(cfg: TrainConfig) -> WorkerSpec:
    """What each rollout worker builds for ``cfg``."""
    first, *others = cfg.env_ids
    return WorkerSpec(
        env_id=first,
        env_kwargs=cfg.env_kwargs_for(first),
        more_envs={e: cfg.env_kwargs_for(e) for e in others},
        env_url=cfg.env_url,
        policy=cfg.policy,
        tokenizer=cfg.vllm_weights or cfg.policy,
        imports=cfg.imports,
        seed=cfg.seed,
        tools_prompt=cfg.tools_prompt,
        system_prompt=cfg.system_prompt,
        sample_dtype=cfg.sample_dtype,
        tool_format=cfg.tool_format,
        served_model=served_weights(cfg) if cfg.policy_spec.kind == "vllm" else "policy",
    )


def served_weights(cfg: TrainConfig) -> str:
    """The folder ``--vllm-weights hf:<dir>`` names, which vLLM servers serve (``vllm serve <dir>``)
    and the learner writes back: ``<dir>`` itself, or for a ``train-agent`` run directory its
    exported ``model/`` (so ``--vllm-weights hf:runs/math`` goes with ``vllm serve runs/math/model``).

    Raises:
        ConfigError: ``<dir>`` is a LoRA run (vLLM servers reload full weights, not an ``adapter/``).
    """
    name = PolicySpec.parse(cfg.vllm_weights).target
    root = Path(name).expanduser()
    if (root / "config.json").exists() or not (root / RUN_STATE).exists():
        return name  # a model folder (or one not written yet): served as named
    if (root / MODEL_DIR / "config.json").exists():
        return str(Path(name) / MODEL_DIR)
    raise ConfigError(
        f"--vllm-weights {cfg.vllm_weights!r} is a train-agent run without model/ (a LoRA run exports adapter/): "
        "vLLM servers reload full weights; write them with "
        f"prm_gym.agents.vllm_server.export_hf_weights({cfg.vllm_weights!r}, <dir>), serve <dir> "
        "and pass --vllm-weights hf:<dir>."
    )


def learner_policy(cfg: TrainConfig) -> str:
    """The ``hf:`` id the learner trains: the served weights for ``vllm:``/``vllm-engine:`` policies."""
    spec = cfg.policy_spec
    if spec.kind == "vllm-engine":
        if cfg.backend == "ray":
            raise ConfigError("--policy vllm-engine: runs vLLM in this process; use --backend local (or vllm:<url>).")
        return f"hf:{spec.target}"
    return cfg.vllm_weights if spec.kind == "vllm" else cfg.policy


def make_source(cfg: TrainConfig, learner: HFPolicy) -> RolloutSource:
    """The rollout source ``cfg`` asks for; ``learner`` is the policy being trained."""
    spec = worker_spec(cfg)
    if cfg.backend == "ray":
        from prm_gym.training.distributed import RayRollouts  # Ray is an optional extra

        return RayRollouts(spec, cfg.num_workers, address=cfg.ray_address)
    n = cfg.num_workers
    if cfg.policy_spec.kind == "vllm-engine":  # one engine per process
        return LocalRollouts(spec)
    if cfg.policy_spec.kind != "hf":
        return LocalRollouts(spec, [None] * n)
    tok, dtype = learner.tokenizer, cfg.sample_dtype
    if cfg.asynchronous.enabled:  # workers sample while the learner trains: each holds its own (plain) copy
        copies = [plain_copy(learner.model).eval() for _ in range(n)]
        return LocalRollouts(spec, [HFPolicy(m, tok, sample_dtype=dtype) for m in copies])
    return LocalRollouts(spec, [HFPolicy(learner.model, tok, sample_dtype=dtype) for _ in range(n)])


class WeightPublisher:
    """Hands the learner's weights to the source after every step.

    ``hf:`` workers get a CPU copy of the state dict (a shared model needs only the version); an
    in-process vLLM engine copies the tensors itself; vLLM servers reload the weights the learner
    saves to ``--vllm-weights`` (the workers then only move their version). With LoRA every copy
    gets the adapters merged into full weights, or, with ``--lora.publish adapter``, vLLM servers
    load the adapter saved under ``<output_dir>/adapters/v<version>`` (:mod:`prm_gym.training.lora`).
    """

    def __init__(self, cfg: TrainConfig, learner: HFPolicy, source: RolloutSource):
        self.cfg, self.learner, self.source = cfg, learner, source
        self.shared = isinstance(source, LocalRollouts) and source.workers[0].policy.model is learner.model
        self.lora = is_lora(learner.model)
        self._plain: Any = None  # a LoRA run's merged copy, saved for vLLM servers to reload
        self.server: Any = None
        if cfg.policy_spec.kind == "vllm":
            from prm_gym.agents.vllm import VLLMPolicy

            spec = worker_spec(cfg)
            self.server = VLLMPolicy(cfg.policy_spec.urls, learner.tokenizer, model=spec.served_model)

    def __call__(self, *, wait: bool = True, initial: bool = False) -> None:
        """Publish the learner's weights; ``initial``: before the first step, when vLLM servers
        already serve the ``--vllm-weights`` files the learner started from (unless it resumed or
        loaded ``--init-checkpoint``), only the version is sent."""
        version, model = self.learner.version, self.learner.model
        fresh = not (self.cfg.resume or self.cfg.init_checkpoint)
        if self.server is not None and initial and fresh:
            self.source.publish(None, version)
        elif self.server is not None and self.lora and self.cfg.lora.publish == "adapter":
            path = save_adapter(model, Path(self.cfg.output_dir) / "adapters" / f"v{version}")
            self.server.load_lora(str(path.resolve()), version=version)
            self.source.publish(ServedAdapter(self.server.served), version)
            for old in path.parent.glob("v*"):  # the servers unloaded the older adapters
                if old != path:
                    shutil.rmtree(old, ignore_errors=True)
        elif self.server is not None:
            self._served_model().save_pretrained(served_weights(self.cfg))
            self.server.reload_weights(version=version)
            self.source.publish(None, version)
        elif self.shared:
            self.source.publish(None, version)
        elif self.cfg.policy_spec.kind == "vllm-engine":
            state = merged_state_dict(model) if self.lora else model.state_dict()
            self.source.publish(state, version)  # the engine copies them, on their device
        else:
            state = merged_state_dict(model) if self.lora else model.state_dict()
            self.source.publish({k: v.detach().cpu().clone() for k, v in state.items()}, version, wait=wait)

    def _served_model(self) -> Any:
        """The model to save for vLLM servers: the learner's, or with LoRA a copy with the adapters merged in."""
        if not self.lora:
            return self.learner.model
        if self._plain is None:
            self._plain = plain_copy(self.learner.model)
        else:
            self._plain.load_state_dict(merged_state_dict(self.learner.model))
        return self._plain


def learner_config(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with the policy the learner builds (see :func:`learner_policy`)."""
    return replace(cfg, policy=learner_policy(cfg))
