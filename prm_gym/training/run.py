"""A training run's state: config, learner policy, optimiser, reference, task ids; built from a
config (or a checkpoint with ``--resume``) and saved as an atomic checkpoint."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import prm_gym  # noqa: F401  (registers prm/ ids)
from prm_gym.agents.chat import DEFAULT_SYSTEM, ChatTemplate
from prm_gym.agents.hf import HFPolicy
from prm_gym.core.errors import ConfigError
from prm_gym.core.make import make_env
from prm_gym.core.seams import RewardKind, trainer_env
from prm_gym.envs.remote import RemoteEnv
from prm_gym.rewards.combine import CombineConfig
from prm_gym.training.checkpoint import CHECKPOINT, load_checkpoint, model_state, save_checkpoint
from prm_gym.training.config import TrainConfig
from prm_gym.training.heldout import warn_if_heldout_reuses
from prm_gym.training.lora import (
    adapter_state,
    add_lora,
    apply_checkpoint,
    is_lora,
    lora_settings,
    plain_copy,
    trainable,
)
from prm_gym.training.model_export import export_model
from prm_gym.training.shaping import declared_outcomes, shaping_of


def env_factory(env_id: str, kwargs: dict[str, Any], env_url: str = "") -> Callable[[], gym.Env]:
    """A function building ``gym.make(env_id, **kwargs)``; checks the id once. With ``env_url``,
    it opens a :class:`RemoteEnv` session on that env server instead (the id need not be
    registered here: the server checks it serves ``env_id``)."""
    if env_url:
        return lambda: RemoteEnv(env_url, env_id=env_id, env_kwargs=kwargs)
    if env_id not in gym.registry:
        known = ", ".join(sorted(k for k in gym.registry if k.startswith("prm/")))
        raise ConfigError(f"env={env_id!r} is not registered; known prm ids: {known}.")
    return lambda: make_env(env_id, **kwargs)


@dataclass
class Run:
    """What a training run holds: config, policy, optimiser, reference, envs, task ids.

    ``make_envs`` and ``train_ids`` have one entry per env id of the run (several in a mixture).
    """

    cfg: TrainConfig
    policy: HFPolicy
    optimizer: torch.optim.Optimizer
    ref: Any
    chat: ChatTemplate
    make_envs: dict[str, Callable[[], gym.Env]]
    train_ids: dict[str, list[str]]
    step: int = 0
    combine: CombineConfig | None = None
    """The combination options (``--shaping.*``: :func:`prm_gym.training.shaping.shaping_of`), applied per group."""


def probe_envs(
    cfg: TrainConfig, chat: ChatTemplate
) -> tuple[dict[str, Callable[[], gym.Env]], dict[str, list[str]], dict[str, dict[str, RewardKind]]]:
    """Per env of the run: its factory (parsing ``chat``'s tool format), its training task ids, and
    its reward terms' kinds (outcome or process, as its judges declare).

    Raises:
        ConfigError: an env is not registered or lacks what training needs (a task set, reward kinds).
    """
    makers = {e: env_factory(e, chat.env_kwargs(cfg.env_kwargs_for(e)), cfg.env_url) for e in cfg.env_ids}
    ids: dict[str, list[str]] = {}
    kinds: dict[str, dict[str, RewardKind]] = {}
    for env_id, make in makers.items():
        probe = make()
        try:
            where = "env" if len(makers) == 1 else f"env {env_id}"
            base = trainer_env(probe, where=where, fork=cfg.algo == "tree-grpo")
            ids[env_id], kinds[env_id] = list(base.tasks.ids), dict(base.reward_kinds)
            if not cfg.resume and not cfg.env_url:  # a remote env shows task ids only
                make_eval = env_factory(env_id, chat.env_kwargs(cfg.eval_env_kwargs_for(env_id)), cfg.env_url)
                warn_if_heldout_reuses(env_id, probe, make_eval, cfg.eval.num_tasks)
        finally:
            probe.close()
    return makers, ids, kinds


def build_run(cfg: TrainConfig) -> Run:
    """Load the policy and optimiser (and the checkpoint when resuming)."""
    policy = HFPolicy.from_id(cfg.policy, seed=cfg.seed, sample_dtype=cfg.sample_dtype)
    if cfg.init_checkpoint:
        policy.model = initial_weights(policy.model, load_checkpoint(cfg.init_checkpoint))
    ref = copy.deepcopy(policy.model).eval() if cfg.loss.kl_coef > 0 else None
    if cfg.lora.rank:  # the reference above is the base; LoRA leaves it as it is
        policy.model = add_lora(policy.model, cfg.lora, seed=cfg.seed)
    optimizer = torch.optim.AdamW(trainable(policy.model), lr=cfg.lr, weight_decay=cfg.weight_decay)
    chat = ChatTemplate(
        policy.tokenizer, cfg.system_prompt or DEFAULT_SYSTEM, tools_block=cfg.tools_prompt, tool_format=cfg.tool_format
    )
    make_envs, train_ids, kinds = probe_envs(cfg, chat)
    cfg = replace(cfg, loss=declared_outcomes(cfg.loss, kinds))  # the outcome terms the judges declare
    run = Run(cfg, policy, optimizer, ref, chat, make_envs, train_ids, combine=shaping_of(cfg))
    has_run = (Path(cfg.output_dir) / CHECKPOINT).exists()
    if not cfg.resume and has_run:
        print(
            f"train-agent: warning: {cfg.output_dir} holds a run; this one starts over and replaces its checkpoint "
            "and metrics (--resume continues it instead)",
            file=sys.stderr,
        )
    if cfg.resume and not has_run:
        # a restart loop that always passes --resume must recover from a kill before the first checkpoint
        print(f"train-agent: no checkpoint in {cfg.output_dir} yet; starting from scratch", file=sys.stderr)
        run.cfg = cfg = replace(cfg, resume=False)
    if cfg.resume:
        state = load_checkpoint(cfg.output_dir)
        if bool(state.get("lora")) != bool(cfg.lora.rank):
            was = f"--lora.rank {state['lora']['rank']}" if state.get("lora") else "without LoRA"
            raise ConfigError(f"resume: the checkpoint in {cfg.output_dir} was trained {was}; resume with the same.")
        policy.model = apply_checkpoint(policy.model, state)
        optimizer.load_state_dict(state["optimizer"])
        policy.version, run.step = int(state["version"]), int(state["step"])
        if ref is not None and state.get("ref") is not None:
            ref.load_state_dict(state["ref"])
    return run


def initial_weights(model: Any, state: dict[str, Any]) -> Any:
    """``model`` with ``--init-checkpoint``'s weights: a state dict or checkpoint, or a LoRA run's
    checkpoint, whose adapters are merged in (the run then starts from plain weights)."""
    if state.get("lora"):
        return plain_copy(apply_checkpoint(model, state))
    model.load_state_dict(model_state(state))
    return model


def checkpoint(run: Run) -> Path:
    """Save the run atomically; a LoRA run saves its adapters only (the base is rebuilt from
    --policy and --init-checkpoint, and so is the reference, which is the base). Beside it the
    weights are exported for transformers, peft and vLLM (:mod:`prm_gym.training.model_export`)."""
    lora = is_lora(run.policy.model)
    state = {
        "model": adapter_state(run.policy.model) if lora else run.policy.model.state_dict(),
        "lora": lora_settings(run.cfg.lora) if lora else None,
        "optimizer": run.optimizer.state_dict(),
        "step": run.step,
        "version": run.policy.version,
        "ref": run.ref.state_dict() if run.ref is not None and not lora else None,
        "config": asdict(run.cfg),
    }
    path = save_checkpoint(run.cfg.output_dir, state)
    export_model(run.policy.model, run.policy.tokenizer, run.cfg.output_dir, run.cfg.policy, run.cfg.init_checkpoint)
    return path


def checkpoint_due(cfg: TrainConfig, step: int) -> bool:
    """True when a checkpoint is written after ``step`` (every ``checkpoint_every`` and the last)."""
    return step >= cfg.steps or bool(cfg.checkpoint_every and step % cfg.checkpoint_every == 0)
