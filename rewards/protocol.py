"""The one batch-first protocol every scorer implements, sync or async."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from rewards.types import Turn, Verdict

Scope = Literal["turn", "final"]


@runtime_checkable
class Judge(Protocol):
    """Scores a batch of turns.

    Attributes:
        name: the registry id (``rule/f1``), used as the key of ``info["judge"]``.
        term: the reward term it feeds (``outcome``, ``process``, ``format``, ``tool``, ...);
            the env reports it as ``info["reward_<term>"]``.
        scope: ``"turn"`` to score every turn, ``"final"`` to score only the turn that ends the
            task (an answer was submitted).

    ``score`` returns one :class:`Verdict` per turn, in order, and raises
    :class:`envs.errors.JudgeError` when it cannot judge (never a silent 0.0).
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


def score_batch(judge: Judge | AsyncJudge, turns: Sequence[Turn]) -> list[Verdict]:
    """Score with either kind of judge from synchronous code."""
    if isinstance(judge, Judge):
        return judge.score(turns)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(judge.ascore(turns))
    raise RuntimeError("score_batch() called inside a running event loop; await judge.ascore() instead.")
