"""Group-level rollout recipe: Resample-on-Correct (GRPO-RoC), and the error count it ranks by.

Pure functions over lists of :class:`prm_gym.agents.rollout.Trajectory`; :mod:`prm_gym.training.collect`
applies them (and dynamic sampling, :func:`prm_gym.training.collect.is_degenerate`) when
``--recipes.*`` turns them on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prm_gym.agents.rollout import Trajectory
from prm_gym.training.batch import outcome_and_process


def split_groups(trajs: Sequence[Trajectory], group_size: int) -> list[list[Trajectory]]:
    """Consecutive chunks of ``group_size`` trajectories."""
    return [list(trajs[i : i + group_size]) for i in range(0, len(trajs), group_size)]


def error_count(traj: Trajectory) -> int:
    """Tool failures plus badly formatted turns of ``traj`` (RoC's quality measure)."""
    count = 0
    for turn in traj.turns:
        tool = turn.info.get("tool", {})
        count += int(tool.get("failed", 0)) if isinstance(tool, dict) else 0
        parse = turn.info.get("parse", {})
        count += int(isinstance(parse, dict) and not parse.get("ok", True))
    return count


def resample_on_correct(
    group: Sequence[Trajectory],
    keep: int,
    outcome_terms: Sequence[str],
    threshold: float,
    rng: np.random.Generator,
) -> list[Trajectory]:
    """GRPO-RoC down-sampling of an oversampled group to ``keep`` trajectories.

    From rStar2-Agent (Shang et al. 2025, *rStar2-Agent: Agentic Reasoning Technical Report*,
    section 3.2): correct trajectories (outcome return >= ``threshold``) are kept in order of
    fewest tool errors and format problems, failed ones are drawn uniformly, so the positive
    examples teach clean tool use while the negatives keep their variety. The correct/failed
    ratio of the oversampled group is kept (at least one of each when both exist).

    Args:
        group: the oversampled group (infra-error trajectories are kept aside and never chosen
            unless nothing else is left).
        keep: the group size to return.
        outcome_terms: the terms that form the outcome return.
        threshold: the outcome return counted as correct.
        rng: the sampler for the failed trajectories.
    """
    usable = [t for t in group if not t.infra_error]
    if len(usable) <= keep:
        return (usable + [t for t in group if t.infra_error])[:keep]
    correct = [t for t in usable if outcome_and_process(t, outcome_terms)[0] >= threshold]
    failed = [t for t in usable if outcome_and_process(t, outcome_terms)[0] < threshold]
    n_pos = round(keep * len(correct) / len(usable))
    if correct and failed:
        n_pos = min(max(n_pos, 1), keep - 1)
    n_pos = min(n_pos, len(correct))
    n_neg = min(keep - n_pos, len(failed))
    n_pos = keep - n_neg
    best = sorted(range(len(correct)), key=lambda i: (error_count(correct[i]), i))[:n_pos]
    picks: list[int] = sorted(int(i) for i in rng.choice(len(failed), size=n_neg, replace=False)) if n_neg else []
    return [correct[i] for i in sorted(best)] + [failed[i] for i in picks]
