"""Fakes shipped with the package for users' and our own tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prm_gym.core.errors import JudgeError
from prm_gym.rewards.protocol import Scope
from prm_gym.rewards.types import Turn, Verdict


class FakeJudge:
    """A judge whose verdicts come from a function, and which counts its calls.

    Args:
        name: the id it reports under ``info["judge"]``.
        fn: ``turn -> score``; raise :class:`JudgeError` to simulate a failure.
        term: the reward term it feeds.
        scope: ``"turn"`` or ``"final"``.
    """

    def __init__(
        self,
        name: str = "fake/judge",
        fn: Callable[[Turn], float] = lambda turn: 1.0,
        term: str = "process",
        scope: Scope = "turn",
    ):
        self.name, self.fn, self.term, self.scope = name, fn, term, scope
        self.calls = 0

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        self.calls += len(turns)
        return [Verdict(float(self.fn(t)), latency_s=0.0, tokens=0) for t in turns]


def failing(message: str = "judge unavailable") -> Callable[[Turn], float]:
    """A verdict function that always raises :class:`JudgeError`."""

    def fn(turn: Turn) -> float:
        raise JudgeError(message)

    return fn
