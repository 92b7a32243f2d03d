"""The env-trainer seam, declared once: what the trainer needs from an env, as Protocols.

The trainer (``prm_gym.training``) reads an env through :func:`trainer_env` and types against
:class:`TrainableEnv` (every mode: the task set and each reward term's kind) or
:class:`ForkableEnv` (Tree-GRPO: also ``fork()``); it never probes ``env.unwrapped`` for
attributes. :class:`prm_gym.envs.base.ToolEnv` and :class:`prm_gym.envs.remote.RemoteEnv`
implement both. A third-party env that lacks a member gets one :class:`ConfigError` naming it.

The optional capability of scoring a group's turns at once (deferred group judges) is a separate
Protocol, :class:`prm_gym.rewards.protocol.GroupJudgingEnv`, next to the judge types it uses.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Literal, Protocol, Self, cast, overload, runtime_checkable

from prm_gym.core.errors import ConfigError
from prm_gym.core.tasks import TaskSet

#: What a reward term counts as for the trainer: ``outcome`` terms, summed over an episode, form the
#: return a group compares; ``process`` terms are credited turn by turn (reward-to-go).
RewardKind = Literal["outcome", "process"]
REWARD_KINDS: tuple[RewardKind, ...] = ("outcome", "process")


@runtime_checkable
class TrainableEnv(Protocol):
    """What the trainer needs from any env it trains on (the env itself, not a wrapper)."""

    @property
    def tasks(self) -> TaskSet:
        """The tasks episodes draw from; ``reset(options={"task_id": ...})`` pins one."""
        ...

    @property
    def reward_kinds(self) -> Mapping[str, RewardKind]:
        """Each reward term the env reports (``info["reward_<term>"]``) and its kind, as the judges
        that feed it declare (:func:`prm_gym.rewards.protocol.reward_kind`)."""
        ...


@runtime_checkable
class ForkableEnv(TrainableEnv, Protocol):
    """A trainable env that Tree-GRPO can branch: a copy at the current turn boundary."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode (as ``gymnasium.Env.reset``)."""
        ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one turn (as ``gymnasium.Env.step``)."""
        ...

    def fork(self) -> Self:
        """A new env at this env's current turn boundary (same task, seed and history)."""
        ...


_MEMBERS: dict[type, tuple[str, ...]] = {
    TrainableEnv: ("tasks", "reward_kinds"),
    ForkableEnv: ("tasks", "reward_kinds", "reset", "step", "fork"),
}


def base_env(env: Any) -> Any:
    """``env`` without its wrappers (``gymnasium.Env.unwrapped``); ``env`` itself when it has none."""
    unwrapped = inspect.getattr_static(env, "unwrapped", None)
    return env.unwrapped if unwrapped is not None else env


@overload
def trainer_env(env: Any, *, fork: Literal[False] = False, where: str = "env") -> TrainableEnv: ...
@overload
def trainer_env(env: Any, *, fork: Literal[True], where: str = "env") -> ForkableEnv: ...
@overload
def trainer_env(env: Any, *, fork: bool, where: str = "env") -> TrainableEnv: ...
def trainer_env(env: Any, *, fork: bool = False, where: str = "env") -> TrainableEnv | ForkableEnv:
    """``env`` (unwrapped) as the trainer sees it: a :class:`TrainableEnv`, or with ``fork=True`` a
    :class:`ForkableEnv` (Tree-GRPO).

    Members are looked up without evaluating them (a remote env's ``tasks`` is fetched on first use).

    Raises:
        ConfigError: the env lacks a member the mode needs; the message names the members and the fix.
    """
    base = base_env(env)
    proto: type = ForkableEnv if fork else TrainableEnv
    missing = [name for name in _MEMBERS[proto] if inspect.getattr_static(base, name, None) is None]
    if missing:
        need = "Tree-GRPO (--algo tree-grpo) needs" if fork else "training needs"
        raise ConfigError(
            f"{where}: {type(base).__name__} lacks {', '.join(missing)}, which {need} "
            f"(prm_gym.core.seams.{proto.__name__}); subclass prm_gym.envs.ToolEnv or implement them."
        )
    return cast(ForkableEnv, base) if fork else cast(TrainableEnv, base)
