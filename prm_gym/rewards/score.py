"""Verdicts into reward terms: the one function that scores turns with a set of weighted judges.

:func:`score_turns` is what an env's ``step`` calls for its turn (:class:`prm_gym.envs.base.ToolEnv`)
and what the rollout workers' group scorer calls for a group's deferred turns
(:func:`prm_gym.training.group_judges.score_deferred`). It decides, once for both:

* which turns a judge sees (a ``scope = "final"`` judge only the turn that ends the task);
* the judge's weighted score added to its term (``reward_<term>``), and the turn's reward, the sum;
* a failure of an outside service (an :class:`~prm_gym.core.errors.InfraError`, a non-finite
  score included) marks the turns of that call ``infra``, unscored; any other exception from a
  judge is a bug in our code and propagates with a note naming the judge;
* verdicts memoised by the turn's content hash (:class:`VerdictMemo`), for judges that memoise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from prm_gym.core.errors import InfraError, JudgeError
from prm_gym.rewards.combine import weighted_sum
from prm_gym.rewards.protocol import AsyncJudge, Judge, score_batch, turn_scorer
from prm_gym.rewards.types import Turn, Verdict

#: The most verdicts a :class:`VerdictMemo` keeps by default, oldest evicted first.
MAX_MEMO = 65_536


class JudgePlan(NamedTuple):
    """One weighted judge, resolved once (not every step).

    Attributes:
        name: the judge id (the key of ``info["judge"]``).
        key: the info key of its term, ``reward_<term>``.
        weight: its weight in the judge expression.
        final_only: it scores only the turn that ends the task (``scope == "final"``).
        memoize: its verdicts are memoised by the turn's content hash.
        one: scores one turn (the judge's own ``score_one`` where it has one).
        judge: the judge, for batches of several turns.
    """

    name: str
    key: str
    weight: float
    final_only: bool
    memoize: bool
    one: Callable[[Turn], Verdict]
    judge: Judge | AsyncJudge


def plan(judges: Iterable[tuple[float, Judge | AsyncJudge]]) -> tuple[JudgePlan, ...]:
    """The :class:`JudgePlan` of each ``(weight, judge)``, in order."""
    return tuple(
        JudgePlan(
            j.name, f"reward_{j.term}", w, j.scope == "final", bool(getattr(j, "memoize", True)), turn_scorer(j), j
        )
        for w, j in judges
    )


class Scored(NamedTuple):
    """One turn's scores.

    Attributes:
        terms: the weighted terms by info key (``reward_<term>``); they sum to ``reward``.
        judges: per judge id, ``Verdict.as_info()`` or ``{"error": ...}`` (``info["judge"]``).
        infra: a judge failed because an outside service did; the turn is not scored by it.
        reward: the sum of ``terms``.
    """

    terms: dict[str, float]
    judges: dict[str, dict[str, Any]]
    infra: bool
    reward: float


class VerdictMemo(dict[tuple[str, str], Verdict]):
    """Verdicts by ``(judge id, turn content hash)``, evicting the oldest beyond ``limit``."""

    def __init__(self, limit: int = MAX_MEMO):
        super().__init__()
        self.limit = limit

    def remember(self, key: tuple[str, str], verdict: Verdict) -> None:
        self[key] = verdict
        if len(self) > self.limit:
            del self[next(iter(self))]


def score_turns(
    plans: Sequence[JudgePlan],
    turns: Sequence[Turn],
    *,
    memo: VerdictMemo | None = None,
    zero: Mapping[str, float] | None = None,
) -> list[Scored]:
    """Score ``turns`` with ``plans``' judges: one call per judge (a batch of the turns it sees).

    Args:
        plans: the weighted judges (:func:`plan`).
        turns: the turns, in order.
        memo: verdicts memoised by content hash (shared by an env and its forks), or None.
        zero: the terms every turn starts from (an env reports all its terms, zero when unscored).

    Returns:
        One :class:`Scored` per turn.

    Raises:
        Exception: what a judge raised that is not an :class:`InfraError` (a bug in the judge), with a
            note naming it; a RuntimeError when it returned a different number of verdicts than turns.
    """
    n = len(turns)
    terms = [dict(zero) if zero else {} for _ in range(n)]
    infos: list[dict[str, dict[str, Any]]] = [{} for _ in range(n)]
    infra = [False] * n
    hashes: list[str | None] = [None] * n
    for p in plans:
        picked = [i for i in range(n) if turns[i].final] if p.final_only else range(n)
        if not picked:
            continue
        try:
            verdicts = _verdicts(p, turns, picked, memo if p.memoize else None, hashes)
        except InfraError as exc:  # an outside service failed: infrastructure, never the agent's score
            error = f"{type(exc).__name__}: {exc}"[:300]
            for i in picked:
                infra[i] = True
                infos[i][p.name] = {"error": error}
            continue
        except Exception as exc:  # a bug in our own judge code: neither the agent's score nor infra
            where = f"task {turns[picked[0]].task.id!r}, turn {turns[picked[0]].index + 1}" if n == 1 else f"{n} turns"
            exc.add_note(f"raised by judge {p.name!r} on {where}: a bug in the judge")
            raise
        for i, verdict in zip(picked, verdicts, strict=True):
            row = terms[i]
            row[p.key] = row.get(p.key, 0.0) + p.weight * verdict.score
            infos[i][p.name] = verdict.as_info()
    return [Scored(t, info, bad, weighted_sum(t)) for t, info, bad in zip(terms, infos, infra, strict=True)]


def _verdicts(
    p: JudgePlan, turns: Sequence[Turn], picked: Sequence[int], memo: VerdictMemo | None, hashes: list[str | None]
) -> list[Verdict]:
    """``p``'s finite verdict for each picked turn: from ``memo``, else from one call for the rest."""
    found: list[Verdict | None] = [None] * len(picked)
    if memo is not None:
        for k, i in enumerate(picked):
            if hashes[i] is None:
                hashes[i] = turns[i].content_hash()
            found[k] = memo.get((p.name, hashes[i]))  # type: ignore[arg-type]
    todo = [k for k, v in enumerate(found) if v is None]
    if todo:
        batch = [turns[picked[k]] for k in todo]
        new = [p.one(batch[0])] if len(batch) == 1 else list(score_batch(p.judge, batch))
        if len(new) != len(batch):
            raise RuntimeError(f"{p.name} returned {len(new)} verdicts for {len(batch)} turns.")
        for k, verdict in zip(todo, new, strict=True):
            if not math.isfinite(verdict.score):
                raise JudgeError(f"{p.name} returned a non-finite score {verdict.score!r}")
            found[k] = verdict
            if memo is not None:
                memo.remember((p.name, hashes[picked[k]]), verdict)  # type: ignore[arg-type]
    return found  # type: ignore[return-value]
