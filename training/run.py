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
from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.errors import ConfigError
from prm_gym.core.hf import HFPolicy
from prm_gym.envs.remote import RemoteEnv
from prm_gym.rewards.combine import CombineConfig
from prm_gym.training.checkpoint import CHECKPOINT, load_checkpoint, model_state, save_checkpoint
from prm_gym.training.config import TrainConfig


def env_factory(env_id: str, kwargs: dict[str, Any], env_url: str = "") -> Callable[[], gym.Env]:
    """A function building ``gym.make(env_id, **kwargs)``; checks the id once. With ``env_url``,
    it opens a :class:`RemoteEnv` session on that env server instead (the id need not be
    registered here: the server checks it serves ``env_id``)."""
    if env_url:
        return lambda: RemoteEnv(env_url, env_id=env_id, env_kwargs=kwargs)
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


def build_run(cfg: TrainConfig) -> Run:
    """Load the policy and optimiser (and the checkpoint when resuming)."""
    policy = HFPolicy.from_id(cfg.policy, seed=cfg.seed, sample_dtype=cfg.sample_dtype)
    if cfg.init_checkpoint:
        policy.model.load_state_dict(model_state(load_checkpoint(cfg.init_checkpoint)))
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    ref = copy.deepcopy(policy.model).eval() if cfg.loss.kl_coef > 0 else None
    chat = ChatTemplate(policy.tokenizer, tools_block=cfg.tools_prompt, tool_format=cfg.tool_format)
    make_env = env_factory(cfg.env, chat.env_kwargs(cfg.env_kwargs_dict), cfg.env_url)
    probe = make_env()
    train_ids = task_ids_of(probe, "env")
    spec = getattr(probe.unwrapped, "judge_spec", None)
    combine = spec.combine_config() if spec is not None else None
    probe.close()
    run = Run(cfg, policy, optimizer, ref, chat, make_env, train_ids, combine=combine)
    if cfg.resume and not (Path(cfg.output_dir) / CHECKPOINT).exists():
        # a restart loop that always passes --resume must recover from a kill before the first checkpoint
        print(f"train-agent: no checkpoint in {cfg.output_dir} yet; starting from scratch", file=sys.stderr)
        run.cfg = cfg = replace(cfg, resume=False)
    if cfg.resume:
        state = load_checkpoint(cfg.output_dir)
        policy.model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        policy.version, run.step = int(state["version"]), int(state["step"])
        if ref is not None and state.get("ref") is not None:
            ref.load_state_dict(state["ref"])
    return run


def checkpoint(run: Run) -> Path:
    state = {
        "model": run.policy.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "step": run.step,
        "version": run.policy.version,
        "ref": run.ref.state_dict() if run.ref is not None else None,
        "config": asdict(run.cfg),
    }
    return save_checkpoint(run.cfg.output_dir, state)


def checkpoint_due(cfg: TrainConfig, step: int) -> bool:
    """True when a checkpoint is written after ``step`` (every ``checkpoint_every`` and the last)."""
    return step >= cfg.steps or bool(cfg.checkpoint_every and step % cfg.checkpoint_every == 0)
