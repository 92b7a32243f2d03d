"""The one batch-first protocol every scorer implements, sync or async."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from prm_gym.core.errors import ConfigError
from prm_gym.core.seams import REWARD_KINDS, RewardKind, base_env
from prm_gym.rewards.types import Turn, Verdict

Scope = Literal["turn", "final"]
T = TypeVar("T")


@runtime_checkable
class Judge(Protocol):
    """Scores a batch of turns.

    Attributes:
        name: the registry id (``rule/f1``), used as the key of ``info["judge"]``.
        term: the reward term it feeds (``outcome``, ``process``, ``format``, ``tool``, ...);
            the env reports it as ``info["reward_<term>"]``.
        scope: ``"turn"`` to score every turn, ``"final"`` to score only the turn that ends the
            task (an answer was submitted).
        kind (optional): what its term counts as for the trainer, ``"outcome"`` (summed over the
            episode into the return a group compares) or ``"process"`` (credited turn by turn);
            default: ``"outcome"`` for ``scope = "final"``, ``"process"`` for ``scope = "turn"``
            (:func:`reward_kind`). The trainer reads it from the judge, never from the term's name.
        memoize (optional, default True): whether envs memoise this judge's verdicts by the
            turn's content hash (so forked episodes replay without new calls); cheap
            deterministic judges set it False.
        group_batched (optional, default False): the judge is cheapest on a whole group's
            turns at once (a model forward pass per call); the rollout workers then defer it
            during the episodes and hand it each group's turns in one ``score`` call
            (:meth:`prm_gym.envs.base.ToolEnv.defer_group_judges`).

    ``score`` returns one :class:`Verdict` per turn, in order, and raises
    :class:`prm_gym.core.errors.JudgeError` when it cannot judge (never a silent 0.0).
    """

    name: str
    term: str
    scope: Scope

    def score(self, turns: Sequence[Turn]) -> list[Verdict]: ...


@runtime_checkable
class AsyncJudge(Protocol):
    """The async twin of :class:`Judge` (for judges that call servers)."""

    name: str
    term: str
    scope: Scope

    async def ascore(self, turns: Sequence[Turn]) -> list[Verdict]: ...


class TurnJudge:
    """Base of judges that score each turn on its own: subclasses implement :meth:`score_one`.

    :meth:`score` is the batch loop over it. Envs call :meth:`score_one` directly (see
    :func:`turn_scorer`), which saves the batch-of-one list on every step.
    """

    name = "turn/base"
    term = "outcome"
    scope: Scope = "final"

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        return [self.score_one(t) for t in turns]

    def score_one(self, turn: Turn) -> Verdict:
        raise NotImplementedError


def reward_kind(judge: Judge | AsyncJudge) -> RewardKind:
    """What ``judge``'s term counts as for the trainer: its ``kind``, else ``"outcome"`` for a judge
    that scores only the final turn and ``"process"`` for one that scores every turn.

    Raises:
        ConfigError: ``kind`` is set to something else.
    """
    kind = getattr(judge, "kind", None)  # optional member: most judges leave it to their scope
    if kind is None:
        return "outcome" if judge.scope == "final" else "process"
    if kind not in REWARD_KINDS:
        raise ConfigError(f"judge {judge.name!r}: kind must be 'outcome' or 'process', got {kind!r}.")
    return kind


def turn_scorer(judge: Judge | AsyncJudge) -> Callable[[Turn], Verdict]:
    """A function that scores one turn with ``judge``: its own ``score_one`` when ``judge`` is a
    :class:`TurnJudge` whose ``score`` is still the plain loop over it, else a batch of one."""
    if isinstance(judge, TurnJudge) and getattr(judge.score, "__func__", None) is TurnJudge.score:
        return judge.score_one
    return lambda turn: score_batch(judge, [turn])[0]


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _private_loop() -> asyncio.AbstractEventLoop:
    """A process-wide event loop running on its own daemon thread, started on first use."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="prm-judge-loop", daemon=True).start()
            _loop = loop
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, even inside a running event loop.

    The coroutine runs on a private loop thread, so a sync caller that is itself called from
    an ``async def`` (a rollout worker, a notebook) does not deadlock its own loop.
    """
    if threading.current_thread().name == "prm-judge-loop":
        raise RuntimeError("run_sync() called from the judge loop itself; await the coroutine instead.")
    return asyncio.run_coroutine_threadsafe(coro, _private_loop()).result()


def score_batch(judge: Judge | AsyncJudge, turns: Sequence[Turn]) -> list[Verdict]:
    """Score with either kind of judge from synchronous code (inside a running loop too)."""
    score = getattr(judge, "score", None)  # not isinstance(): runtime Protocol checks are slow
    if callable(score):
        return list(score(turns))
    return run_sync(judge.ascore(turns))  # type: ignore[union-attr]


@runtime_checkable
class GroupJudgingEnv(Protocol):
    """An env that can leave its group-batched judges to the caller (``group_batched = True``), who
    scores a whole group's turns in one call (:func:`prm_gym.training.group_judges.score_deferred`).

    Optional: :class:`prm_gym.envs.base.ToolEnv` has it; an env without it scores every turn itself.
    """

    def defer_group_judges(self, on: bool = True) -> list[str]:
        """Defer (or, ``on=False``, stop deferring) the group-batched judges; the ids now deferred."""
        ...

    @property
    def deferred_judges(self) -> list[tuple[float, Judge | AsyncJudge]]:
        """``(weight, judge)`` of the deferred judges."""
        ...

    def take_deferred_turns(self) -> list[Turn]:
        """The episode's turns since the last call, one per step, in order."""
        ...


def group_judging_env(env: Any) -> GroupJudgingEnv | None:
    """``env`` (unwrapped) when it can defer group judges, else None."""
    base = base_env(env)
    return base if isinstance(base, GroupJudgingEnv) else None
