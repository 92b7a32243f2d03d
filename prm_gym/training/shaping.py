"""Reward shaping the trainer applies before advantages: judge combination modes and overlong.

* :func:`combined_returns` applies the options of the env's judge expression after ``;``
  (``credit=min``, ``gate=...``, ``norm=...``, ``clip=...``, see :mod:`prm_gym.rewards.combine`) per
  group with :func:`prm_gym.rewards.combine.combine_group`; the env itself scores turn by turn and
  cannot see the group, so these group/trajectory-level modes are the trainer's job.
* :func:`overlong_penalty` is DAPO's soft overlong punishment (Yu et al. 2025, *DAPO: An Open-Source
  LLM Reinforcement Learning System at Scale*, section 3.4), applied per turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from prm_gym.agents.rollout import Trajectory
from prm_gym.rewards.combine import CombineConfig, combine_group, normalize


def is_active(config: CombineConfig | None) -> bool:
    """True when ``config`` changes anything (any option other than the defaults)."""
    return config is not None and config != CombineConfig()


def combined_returns(
    outcomes: Sequence[float],
    process: Sequence[Sequence[float]],
    groups: Sequence[int],
    config: CombineConfig,
) -> tuple[list[float], list[list[float]]]:
    """The outcome returns and per-turn process rewards after ``config``'s combination, per group.

    :func:`combine_group` turns each group's per-turn process rewards and outcomes into one reward
    per turn (outcome mixed into the last turn). The trainer still needs the two parts apart (the
    outcome feeds group advantages, the process part the turn-level reward-to-go), so the mixed
    outcome (the outcome normalised over the group as ``config.norm`` says) is the new outcome
    return and the rest of each turn's combined reward is its process reward. Per trajectory the
    two parts sum to exactly what :func:`combine_group` returned.

    Args:
        outcomes: per trajectory, its outcome return.
        process: per trajectory, its per-turn process rewards.
        groups: per trajectory, its group index.
        config: the combination options.
    """
    new_out = list(map(float, outcomes))
    new_proc = [list(map(float, p)) for p in process]
    for g in sorted(set(groups)):
        idx = [i for i, x in enumerate(groups) if x == g]
        combined = combine_group([process[i] for i in idx], [outcomes[i] for i in idx], config)
        mixed = normalize([outcomes[i] for i in idx], config.norm)
        for i, rewards, m in zip(idx, combined, mixed, strict=True):
            if rewards:
                rewards[-1] -= m
            new_out[i], new_proc[i] = m, rewards
    return new_out, new_proc


def overlong_penalty(traj: Trajectory, max_new_tokens: int, buffer: int, penalty: float) -> float:
    """DAPO soft overlong punishment summed over the turns of ``traj`` (<= 0).

    A turn of ``L`` sampled tokens loses ``penalty * (L - (max_new_tokens - buffer)) / buffer``
    once ``L`` passes ``max_new_tokens - buffer``, so a turn cut off at ``max_new_tokens`` loses
    ``penalty`` and shorter turns lose nothing.

    Args:
        traj: the trajectory.
        max_new_tokens: the per-turn sampling limit.
        buffer: the length of the punishment interval (0: no penalty).
        penalty: the largest penalty per turn.
    """
    if buffer <= 0 or penalty == 0:
        return 0.0
    start = max_new_tokens - buffer
    total = 0.0
    for turn in traj.turns:
        over = (turn.end - turn.start) - start
        if over > 0:
            total -= penalty * min(over, buffer) / buffer
    return total
