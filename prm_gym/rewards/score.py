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
from collections.abc import Callable, Iterable, Sequence
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


#: One turn's scores, ``(terms, judges, infra, reward)`` (a plain tuple: the env builds one every step):
#: ``terms`` the weighted terms by info key (``reward_<term>``), which sum to ``reward``; ``judges`` per
#: judge id ``Verdict.as_info()`` or ``{"error": ...}`` (``info["judge"]``); ``infra`` True when a judge
#: failed because an outside service did (the turn is not scored by that judge).
Scored = tuple[dict[str, float], dict[str, dict[str, Any]], bool, float]


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
    zero: dict[str, float] | None = None,
) -> list[Scored]:
    """Score ``turns`` with ``plans``' judges: one call per judge (a batch of the turns it sees).

    Args:
        plans: the weighted judges (:func:`plan`).
        turns: the turns, in order (an env step passes its one turn; the group scorer a group's).
        memo: verdicts memoised by content hash (shared by an env and its forks), or None.
        zero: the terms every turn starts from (an env reports all its terms, zero when unscored).

    Returns:
        One :class:`Scored` per turn.

    Raises:
        Exception: what a judge raised that is not an :class:`InfraError` (a bug in the judge), with a
            note naming it; a RuntimeError when it returned a different number of verdicts than turns.
    """
    if len(turns) == 1:  # every env step: the same rules, without the batch bookkeeping
        return [_score_one(plans, turns[0], memo, zero)]
    n = len(turns)
    terms = [dict(zero) if zero else {} for _ in range(n)]
    infos: list[dict[str, dict[str, Any]]] = [{} for _ in range(n)]
    infra = [False] * n
    hashes: list[str | None] = [None] * n
    for p in plans:
        picked = [i for i in range(n) if turns[i].final or not p.final_only]
        if not picked:
            continue
        try:
            verdicts = _batch_verdicts(p, [turns[i] for i in picked], memo if p.memoize else None, hashes, picked)
        except InfraError as exc:  # an outside service failed: infrastructure, never the agent's score
            for i in picked:
                infra[i] = True
                infos[i][p.name] = _error_info(exc)
            continue
        except Exception as exc:  # a bug in our own judge code: neither the agent's score nor infra
            exc.add_note(f"raised by judge {p.name!r} on {len(picked)} turns of task {turns[0].task.id!r}: {_BUG}")
            raise
        for i, verdict in zip(picked, verdicts, strict=True):
            row = terms[i]
            row[p.key] = row.get(p.key, 0.0) + p.weight * verdict.score
            infos[i][p.name] = verdict.as_info()
    return [(t, info, bad, weighted_sum(t)) for t, info, bad in zip(terms, infos, infra, strict=True)]


_BUG = "a bug in the judge"


def _score_one(
    plans: Sequence[JudgePlan], turn: Turn, memo: VerdictMemo | None, zero: dict[str, float] | None
) -> Scored:
    """:func:`score_turns` for one turn."""
    terms: dict[str, float] = zero.copy() if zero else {}
    info: dict[str, dict[str, Any]] = {}
    failed = False
    total = 0.0
    key: str | None = None
    final = turn.final
    for name, term_key, weight, final_only, memoize, one, _ in plans:  # unpacked: cheaper than attributes
        if final_only and not final:
            continue
        try:
            if memo is not None and memoize:
                if key is None:
                    key = turn.content_hash()
                verdict = memo.get((name, key))
                if verdict is None:
                    verdict = _finite(name, one(turn))
                    memo.remember((name, key), verdict)
            else:
                verdict = one(turn)
                if not _isfinite(verdict.score):
                    _finite(name, verdict)  # raises
        except InfraError as exc:  # an outside service failed: infrastructure, never the agent's score
            failed = True
            info[name] = _error_info(exc)
            continue
        except Exception as exc:  # a bug in our own judge code: neither the agent's score nor infra
            exc.add_note(f"raised by judge {name!r} on task {turn.task.id!r}, turn {turn.index + 1}: {_BUG}")
            raise
        value = weight * verdict.score
        terms[term_key] = terms.get(term_key, 0.0) + value
        total += value
        info[name] = verdict.as_info()
    if not _isfinite(total):
        weighted_sum(terms)  # raises, naming the term
    return terms, info, failed, total


def _batch_verdicts(
    p: JudgePlan, batch: list[Turn], memo: VerdictMemo | None, hashes: list[str | None], picked: list[int]
) -> list[Verdict]:
    """``p``'s finite verdict for each turn of ``batch`` (``picked`` are their indices in ``hashes``):
    from ``memo``, else from one ``score`` call for the rest."""
    found: list[Verdict | None] = [None] * len(batch)
    if memo is not None:
        for k, i in enumerate(picked):
            if hashes[i] is None:
                hashes[i] = batch[k].content_hash()
            found[k] = memo.get((p.name, str(hashes[i])))
    todo = [k for k, v in enumerate(found) if v is None]
    if todo:
        new = list(score_batch(p.judge, [batch[k] for k in todo]))
        if len(new) != len(todo):
            raise RuntimeError(f"{p.name} returned {len(new)} verdicts for {len(todo)} turns.")
        for k, verdict in zip(todo, new, strict=True):
            found[k] = _finite(p.name, verdict)
            if memo is not None:
                memo.remember((p.name, str(hashes[picked[k]])), verdict)
    return [v for v in found if v is not None]


_isfinite = math.isfinite


def _finite(name: str, verdict: Verdict) -> Verdict:
    """``verdict``, or a :class:`JudgeError` (infrastructure) when its score is not finite."""
    if not math.isfinite(verdict.score):
        raise JudgeError(f"{name} returned a non-finite score {verdict.score!r}")
    return verdict


def _error_info(exc: BaseException) -> dict[str, Any]:
    """``info["judge"][<id>]`` of a judge that failed for an outside reason."""
    return {"error": f"{type(exc).__name__}: {exc}"[:300]}
