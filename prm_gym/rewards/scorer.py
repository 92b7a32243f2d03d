"""An env's judges, ready to score its turns: the weighted judges, their verdict memo, the terms
they feed and what kind each term is, and which judges are left to a group scorer.

:class:`prm_gym.envs.base.ToolEnv` holds one :class:`TurnScorer` and calls :meth:`TurnScorer.score`
for every turn; the scoring itself is :func:`prm_gym.rewards.score.score_turns`, the one function
the env step and the rollout workers' group scorer share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.seams import RewardKind
from prm_gym.rewards.combine import JudgeSpec
from prm_gym.rewards.protocol import AsyncJudge, Judge, reward_kind
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.score import MAX_MEMO, Scored, VerdictMemo, plan, score_turns
from prm_gym.rewards.types import Turn


class TurnScorer:
    """The judges of a judge expression, built once.

    Args:
        spec: the parsed judge expression.
        judge_kwargs: keyword arguments per judge id.

    Attributes:
        judges: ``(weight, judge)`` in expression order.
        reward_terms: the terms they feed, in order (each reported as ``info["reward_<term>"]``).
        reward_kinds: each term's kind (outcome or process), as its judges declare.
        memo: verdicts by content hash; an env's forks share it (:meth:`share_memo`).
    """

    def __init__(self, spec: JudgeSpec, judge_kwargs: Mapping[str, dict[str, Any]] | None = None):
        kw = judge_kwargs or {}
        self.judges: list[tuple[float, Judge | AsyncJudge]] = [
            (w, make_judge(j, **kw.get(j, {}))) for w, j in spec.items
        ]
        self.reward_terms: list[str] = list(dict.fromkeys(j.term for _, j in self.judges))
        self.reward_kinds: Mapping[str, RewardKind] = kinds_of_terms(self.judges)
        self.memo = VerdictMemo(MAX_MEMO)
        self._zero = {f"reward_{term}": 0.0 for term in self.reward_terms}  # every turn reports every term
        self._plan = plan(self.judges)
        self._active = self._plan  # all but the deferred judges
        self._deferred: frozenset[str] = frozenset()
        self._pending: list[Turn] = []  # the episode's turns, for the deferred judges

    def score(self, turn: Turn) -> Scored:
        """The turn's weighted terms (keyed ``reward_<term>``), each judge's info, whether a judge's
        outside service failed, and the reward; deferred judges are left out (the turn is kept)."""
        terms, info, failed, reward = score_turns(self._active, (turn,), memo=self.memo, zero=self._zero)[0]
        if self._deferred:
            self._pending.append(turn)
            for p in self._plan:
                if p.name in self._deferred and (turn.final or not p.final_only):
                    info[p.name] = {"deferred": 1}
        return terms, info, failed, reward

    def new_episode(self) -> None:
        self._pending = []

    def defer_group_judges(self, on: bool = True) -> list[str]:
        """Leave the group-batched judges (``group_batched = True``) to the caller, or score them
        every turn again (``on=False``); the ids now deferred."""
        names = [j.name for _, j in self.judges if on and getattr(j, "group_batched", False)]
        self._deferred = frozenset(names)
        self._active = tuple(p for p in self._plan if p.name not in self._deferred)
        return names

    @property
    def deferred_judges(self) -> list[tuple[float, Judge | AsyncJudge]]:
        return [(w, j) for w, j in self.judges if j.name in self._deferred]

    def take_deferred_turns(self) -> list[Turn]:
        turns, self._pending = self._pending, []
        return turns


def kinds_of_terms(judges: Sequence[tuple[float, Judge | AsyncJudge]]) -> dict[str, RewardKind]:
    """Each term and its kind, as its judges declare (:func:`prm_gym.rewards.protocol.reward_kind`).

    Raises:
        ConfigError: two judges of different kinds feed one term (the trainer could not split it).
    """
    kinds: dict[str, RewardKind] = {}
    first: dict[str, str] = {}
    for _, j in judges:
        kind = reward_kind(j)
        if kinds.setdefault(j.term, kind) != kind:
            raise ConfigError(
                f"judges {first[j.term]!r} ({kinds[j.term]}) and {j.name!r} ({kind}) both feed reward term "
                f"{j.term!r}; give one of them another term (its term= argument) so outcome and process stay apart."
            )
        first.setdefault(j.term, j.name)
    return kinds
