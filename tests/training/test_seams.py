"""The env-trainer seam is declared once (prm_gym.core.seams) and the trainer reads envs only through it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.core.seams import ForkableEnv, TrainableEnv, trainer_env
from prm_gym.core.spaces import UnicodeText
from prm_gym.core.tasks import Task, TaskSet
from prm_gym.envs.remote import RemoteEnv
from prm_gym.rewards.protocol import GroupJudgingEnv, group_judging_env
from prm_gym.training.group_judges import defer_group_judges

TRAINING = Path(__file__).resolve().parents[2] / "prm_gym" / "training"


def test_training_never_probes_env_unwrapped() -> None:
    """No ``x.unwrapped`` and no getattr/hasattr of an env attribute anywhere in prm_gym/training."""
    found = []
    for path in sorted(TRAINING.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "unwrapped":
                found.append(f"{path.name}:{node.lineno}: .unwrapped")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
            ):
                text = ast.unparse(node)
                if "env" in text or "unwrapped" in text:
                    found.append(f"{path.name}:{node.lineno}: {text}")
    assert not found, "\n".join(found)


class _Bare(gym.Env[str, str]):
    """A Gymnasium env with neither a task set nor reward kinds."""

    action_space = UnicodeText(10)
    observation_space = UnicodeText(10)


class _NoFork(_Bare):
    """Trainable (tasks, reward kinds) but cannot be forked."""

    def __init__(self) -> None:
        self.tasks = TaskSet([Task("t0", "p")])
        self.reward_kinds = {"outcome": "outcome"}


def test_an_env_without_the_members_gets_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match=r"eval\.env_kwargs: _Bare lacks tasks, reward_kinds.*TrainableEnv"):
        trainer_env(_Bare(), where="eval.env_kwargs")
    env = _NoFork()
    assert trainer_env(env) is env  # enough for chain GRPO
    with pytest.raises(ConfigError, match=r"_NoFork lacks fork, which Tree-GRPO"):
        trainer_env(env, fork=True)


def test_a_registered_env_without_tasks_fails_train_agent_with_the_error() -> None:
    from prm_gym.agents.chat import ChatTemplate
    from prm_gym.core.models import tiny_tokenizer
    from prm_gym.training.config import TrainConfig
    from prm_gym.training.run import probe_envs

    gym.register("seamtest/Bare-v0", entry_point=_Bare)
    try:
        with pytest.raises(ConfigError, match="_Bare lacks tasks"):
            probe_envs(TrainConfig(env="seamtest/Bare-v0"), ChatTemplate(tiny_tokenizer()))
    finally:
        del gym.registry["seamtest/Bare-v0"]


def test_tool_envs_implement_the_seams_through_their_wrappers() -> None:
    env = gym.make("prm/Math-v0", levels=[1], num_tasks=2)
    try:
        base = trainer_env(env, fork=True)
        assert base is env.unwrapped and isinstance(base, ForkableEnv) and isinstance(base, TrainableEnv)
        assert dict(base.reward_kinds) == {"outcome": "outcome", "format": "process", "tool": "process"}
        assert group_judging_env(env) is base and isinstance(base, GroupJudgingEnv)
    finally:
        env.close()


def test_remote_envs_are_trainable_and_cannot_defer_group_judges() -> None:
    for member in ("tasks", "fork", "reset", "step"):
        assert hasattr(RemoteEnv, member)
    remote: Any = RemoteEnv.__new__(RemoteEnv)  # no server: only the class's members are looked at
    remote.reward_kinds = {}
    assert trainer_env(remote, fork=True) is remote
    assert group_judging_env(remote) is None and defer_group_judges(remote) == []
