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

from collections.abc import Sequence
from typing import Any

from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.core.errors import JudgeError
from prm_gym.rewards.protocol import group_judging_env
from prm_gym.rewards.score import plan, score_turns
from prm_gym.rewards.types import Turn


def defer_group_judges(env: Any) -> list[str]:
    """Defer ``env``'s group-batched judges; the ids deferred (empty for an env that cannot:
    one without :class:`prm_gym.rewards.protocol.GroupJudgingEnv`)."""
    base = group_judging_env(env)
    return list(base.defer_group_judges()) if base is not None else []


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
    bases = [group_judging_env(e) for e in envs]
    judges = bases[0].deferred_judges if bases and bases[0] is not None else []
    if not judges:
        return 0
    rows: list[tuple[Turn, TurnRecord]] = []
    for base, traj in zip(bases, trajs, strict=True):
        turns = base.take_deferred_turns() if base is not None else []
        if len(turns) != len(traj.turns):
            raise JudgeError(f"{len(turns)} deferred turns for a trajectory of {len(traj.turns)} turns.")
        rows += list(zip(turns, traj.turns, strict=True))
    scored = score_turns(plan(judges), [t for t, _ in rows])  # the env step's scoring, over the group
    for (_, rec), (terms, verdicts, infra, reward) in zip(rows, scored, strict=True):
        for key, value in terms.items():  # each verdict goes into its record as env.step would put it
            term = key[len("reward_") :]
            rec.terms[term] = rec.terms.get(term, 0.0) + value
            rec.info[key] = rec.terms[term]
        rec.reward += reward
        rec.info.setdefault("judge", {}).update(verdicts)
        if infra:
            rec.status = rec.info["reward_status"] = "infra_error"
    return len(judges)
