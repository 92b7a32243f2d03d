"""Judges scored once per GRPO group instead of once per turn (``group_batched`` judges).

IGPO's information gain (``progress/info_gain``, :mod:`prm_gym.rewards.info_gain`) teacher-forces
the gold answer after every turn: scored inside ``env.step`` that is one forward pass per turn,
scored over a whole group it is one padded pass. A rollout worker therefore asks its envs to defer
such judges (:func:`defer_group_judges`), plays the group as usual, then hands the group's turns
to the judge in one ``score`` call (:func:`score_deferred`), which writes each verdict into its
turn's reward, terms and infos exactly as ``env.step`` would have.

Every env of a worker is built from the same spec, so one judge instance (the first env's) scores
the whole group; the other envs never load its model. Envs served by ``prm-serve``
(:class:`prm_gym.envs.remote.RemoteEnv`) and Tree-GRPO's forked envs keep scoring every turn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.core.errors import InfraError, JudgeError
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.types import Turn, Verdict


def defer_group_judges(env: Any) -> list[str]:
    """Defer ``env``'s group-batched judges; the ids deferred (empty for an env that cannot)."""
    defer = getattr(getattr(env, "unwrapped", env), "defer_group_judges", None)
    return list(defer()) if callable(defer) else []


def score_deferred(envs: Sequence[Any], trajs: Sequence[Trajectory]) -> int:
    """Score the group's deferred judges, one ``score`` call per judge, into ``trajs``.

    Args:
        envs: the envs that played ``trajs`` (``envs[i]`` played ``trajs[i]``), deferring judges.
        trajs: the group's trajectories, as :func:`prm_gym.agents.rollout.rollout` returned them.

    Returns:
        The number of ``score`` calls made (one per deferred judge; 0 when nothing was deferred).

    Raises:
        JudgeError: an env's deferred turns do not line up with its trajectory's turns.
    """
    unwrapped = [getattr(e, "unwrapped", e) for e in envs]
    judges = unwrapped[0].deferred_judges if unwrapped and hasattr(unwrapped[0], "deferred_judges") else []
    if not judges:
        return 0
    rows: list[tuple[Turn, TurnRecord]] = []
    for env, traj in zip(unwrapped, trajs, strict=True):
        turns = env.take_deferred_turns()
        if len(turns) != len(traj.turns):
            raise JudgeError(f"{len(turns)} deferred turns for a trajectory of {len(traj.turns)} turns.")
        rows += list(zip(turns, traj.turns, strict=True))
    for weight, judge in judges:
        picked = [(t, rec) for t, rec in rows if judge.scope != "final" or t.final]
        if picked:
            _apply(judge.name, judge.term, weight, judge, picked)
    return len(judges)


def _apply(name: str, term: str, weight: float, judge: Any, rows: list[tuple[Turn, TurnRecord]]) -> None:
    """One ``score`` call over ``rows``' turns; each verdict goes into its record as ``env.step`` would."""
    try:
        verdicts: list[Verdict] = score_batch(judge, [t for t, _ in rows])
    except InfraError as exc:  # an outside service failed: every turn of the call is infra, none scored
        for _, rec in rows:
            rec.status = rec.info["reward_status"] = "infra_error"
            rec.info.setdefault("judge", {})[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        return
    except Exception as exc:  # a bug in the judge: propagate, named
        exc.add_note(f"raised by judge {name!r} scoring a group of {len(rows)} deferred turns: a bug in the judge")
        raise
    if len(verdicts) != len(rows):
        raise JudgeError(f"{name} returned {len(verdicts)} verdicts for {len(rows)} turns.")
    for (_, rec), verdict in zip(rows, verdicts, strict=True):
        if not math.isfinite(verdict.score):
            raise JudgeError(f"{name} returned a non-finite score {verdict.score!r}")
        value = weight * verdict.score
        rec.terms[term] = rec.terms.get(term, 0.0) + value
        rec.info[f"reward_{term}"] = rec.terms[term]
        rec.reward += value
        rec.info.setdefault("judge", {})[name] = verdict.as_info()
