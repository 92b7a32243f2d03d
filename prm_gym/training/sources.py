"""Rollout sources: where a step's episodes are played. The loop in :mod:`prm_gym.training.trainer`
talks to every backend through one small interface, :class:`RolloutSource`.

* :class:`LocalRollouts`: ``--num-workers`` :class:`prm_gym.training.worker.RolloutWorker` threads in
  this process (groups whose episodes wait on tools overlap). With a synchronous run they sample
  with the learner's own model (nothing to copy); with an asynchronous one each holds a copy that
  takes published weights between groups.
* :class:`prm_gym.training.distributed.RayRollouts`: workers as Ray actors (``--backend ray``).
* ``--policy vllm:<url>``: either of the above, whose workers sample from vLLM servers; the learner
  writes its weights where the servers read them and asks them to reload (:func:`weight_publisher`).
* ``--policy vllm-engine:<dir>``: a local worker sampling from an in-process vLLM engine into which
  the learner's tensors are copied after every step.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from prm_gym.agents.hf import HFPolicy
from prm_gym.agents.rollout import Trajectory
from prm_gym.core.errors import ConfigError, InfraError
from prm_gym.core.models import MODEL_DIR, RUN_STATE
from prm_gym.core.policy import SamplingParams
from prm_gym.core.policy_spec import PolicySpec
from prm_gym.training.config import TrainConfig, TreeConfig
from prm_gym.training.lora import is_lora, merged_state_dict, plain_copy, save_adapter
from prm_gym.training.units import RolloutUnit
from prm_gym.training.worker import CollectStats, Job, RolloutWorker, ServedAdapter, WorkerSpec, eval_chunks

T = TypeVar("T")
R = TypeVar("R")


class RolloutSource(Protocol):
    """Where episodes are played: collect jobs, take new weights, stop early, release everything."""

    def collect(
        self, jobs: Sequence[Job], sampling: SamplingParams, max_context_tokens: int, tree: TreeConfig | None = None
    ) -> tuple[list[RolloutUnit], CollectStats]:
        """Play ``jobs`` (GRPO groups, or with ``tree`` each task's trees); the finished ones, in order."""
        ...

    def evaluate(
        self, env_id: str, episodes: Sequence[tuple[str, int]], sampling: SamplingParams, max_context_tokens: int
    ) -> list[Trajectory]:
        """Play held-out ``(task_id, seed)`` episodes of ``env_id`` with the newest weights; in order."""
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
    ) -> tuple[list[RolloutUnit], CollectStats]:
        stats, counting = CollectStats(), threading.Lock()

        def play(worker: RolloutWorker, job: Job) -> RolloutUnit | None:
            task_id, seeds, env = Job(*job)
            try:
                return worker.play(task_id, seeds, sampling, max_context_tokens, tree, env)
            except InfraError:  # an env backend died outside an episode's turns: drop the group
                with counting:
                    stats.dropped_groups += 1
                worker.drop_envs()
                return None

        units = self._each(jobs, play)
        return [u for u in units if u is not None], stats

    def evaluate(
        self, env_id: str, episodes: Sequence[tuple[str, int]], sampling: SamplingParams, max_context_tokens: int
    ) -> list[Trajectory]:
        done = self._each(eval_chunks(episodes), lambda w, part: w.evaluate(env_id, part, sampling, max_context_tokens))
        return [t for part in done for t in part]

    def _each(self, items: Sequence[T], call: Callable[[RolloutWorker, T], R]) -> list[R]:
        """``call(worker, item)`` for every item, a free worker taking the next one (each with the
        newest published weights); the results in item order. Items not started before
        :meth:`cancel` are left out."""
        todo = iter(enumerate(items))
        take = threading.Lock()
        results: dict[int, R] = {}

        def drive(w: int) -> None:
            worker = self.workers[w]
            while not self._cancel.is_set():
                with take:
                    nxt = next(todo, None)
                if nxt is None:
                    return
                i, item = nxt
                with self._locks[w]:
                    with self._slot:
                        pending, self._pending[w] = self._pending[w], None
                    if pending is not None:
                        worker.set_weights(*pending)
                    results[i] = call(worker, item)

        if len(self.workers) == 1:
            drive(0)
        else:
            with ThreadPoolExecutor(len(self.workers), "prm-local-worker") as pool:
                list(pool.map(drive, range(len(self.workers))))
        return [results[i] for i in sorted(results)]

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
        eval_envs={e: cfg.eval_env_kwargs_for(e) for e in cfg.env_ids},
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


class _Publisher:
    """Hands the learner's weights to the source after every step (see :func:`weight_publisher`).
    ``initial``: before the first step. With LoRA every copy gets the adapters merged into full
    weights, unless a subclass serves adapters itself."""

    def __init__(self, cfg: TrainConfig, learner: HFPolicy, source: RolloutSource):
        self.cfg, self.learner, self.source = cfg, learner, source
        self.lora = is_lora(learner.model)

    def state(self) -> dict[str, Any]:
        """The learner's full weights (LoRA merged in)."""
        model = self.learner.model
        return merged_state_dict(model) if self.lora else model.state_dict()

    def __call__(self, *, wait: bool = True, initial: bool = False) -> None:
        raise NotImplementedError


class _LocalPublisher(_Publisher):
    """``hf:`` workers in this process: a worker sharing the learner's model needs only the version;
    the others (async copies, Ray workers) get a CPU copy of the state dict."""

    def __init__(self, cfg: TrainConfig, learner: HFPolicy, source: RolloutSource):
        super().__init__(cfg, learner, source)
        self.shared = isinstance(source, LocalRollouts) and source.workers[0].policy.model is learner.model

    def __call__(self, *, wait: bool = True, initial: bool = False) -> None:
        version = self.learner.version
        if self.shared:
            self.source.publish(None, version)
        else:
            state = {k: v.detach().cpu().clone() for k, v in self.state().items()}
            self.source.publish(state, version, wait=wait)


class _EnginePublisher(_Publisher):
    """An in-process vLLM engine (``vllm-engine:``) copies the tensors itself, onto its device."""

    def __call__(self, *, wait: bool = True, initial: bool = False) -> None:
        self.source.publish(self.state(), self.learner.version)


class _ServerPublisher(_Publisher):
    """vLLM servers (``vllm:``) reload the weights the learner saves to ``--vllm-weights``; with
    ``--lora.publish adapter`` they load the adapter saved under ``<output_dir>/adapters/v<version>``
    (:mod:`prm_gym.training.lora`). The workers then only move their version."""

    def __init__(self, cfg: TrainConfig, learner: HFPolicy, source: RolloutSource):
        super().__init__(cfg, learner, source)
        from prm_gym.agents.vllm import VLLMPolicy

        self._plain: Any = None  # a LoRA run's merged copy, saved for the servers to reload
        self.server = VLLMPolicy(cfg.policy_spec.urls, learner.tokenizer, model=worker_spec(cfg).served_model)

    def __call__(self, *, wait: bool = True, initial: bool = False) -> None:
        """Before the first step of a fresh run the servers already serve the ``--vllm-weights`` files
        the learner started from, so only the version is sent (not after a resume or
        ``--init-checkpoint``)."""
        version, model = self.learner.version, self.learner.model
        if initial and not (self.cfg.resume or self.cfg.init_checkpoint):
            self.source.publish(None, version)
        elif self.lora and self.cfg.lora.publish == "adapter":
            path = save_adapter(model, Path(self.cfg.output_dir) / "adapters" / f"v{version}")
            self.server.load_lora(str(path.resolve()), version=version)
            self.source.publish(ServedAdapter(self.server.served), version)
            for old in path.parent.glob("v*"):  # the servers unloaded the older adapters
                if old != path:
                    shutil.rmtree(old, ignore_errors=True)
        else:
            self._served_model().save_pretrained(served_weights(self.cfg))
            self.server.reload_weights(version=version)
            self.source.publish(None, version)

    def _served_model(self) -> Any:
        """The model to save for the servers: the learner's, or with LoRA a copy with the adapters merged in."""
        if not self.lora:
            return self.learner.model
        if self._plain is None:
            self._plain = plain_copy(self.learner.model)
        else:
            self._plain.load_state_dict(merged_state_dict(self.learner.model))
        return self._plain


PUBLISHERS: dict[str, type[_Publisher]] = {
    "hf": _LocalPublisher,
    "vllm-engine": _EnginePublisher,
    "vllm": _ServerPublisher,
}
"""How the learner's weights reach each trainable policy kind's samplers."""


def weight_publisher(cfg: TrainConfig, learner: HFPolicy, source: RolloutSource) -> _Publisher:
    """The publisher of ``cfg``'s policy kind: called after every step (``publish(initial=True)``
    before the first), it hands the learner's weights to the rollout source."""
    return PUBLISHERS[cfg.policy_spec.kind](cfg, learner, source)


def learner_config(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with the policy the learner builds (see :func:`learner_policy`)."""
    return replace(cfg, policy=learner_policy(cfg))
