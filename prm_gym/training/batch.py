"""From trajectories to a training batch: padded ids, loss mask, behaviour log-probs, advantages.

The reward of each turn is split into an *outcome* part (the terms named in
``LossConfig.outcome_terms``, summed over the episode into the return that groups compare)
and a *process* part (every other term, credited turn by turn through reward-to-go).
Trajectories with an ``infra_error`` turn are excluded from the statistics and the loss, and
groups left with fewer than two valid members are excluded whole; both are counted.

Before advantages, :func:`shaped_returns` applies the env judge expression's combination options
(``credit``/``gate``/``norm``/``clip`` after ``;``, per group, :mod:`prm_gym.training.shaping`) and DAPO's
overlong penalty; ``LossConfig.std_scope="batch"`` selects Lite PPO's batch-level std.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from prm_gym.agents.rollout import Trajectory
from prm_gym.rewards.combine import CombineConfig
from prm_gym.training.advantages import (
    batch_std_advantages,
    group_advantages,
    igpo_advantages,
    spread_to_tokens,
    tree_advantages,
    turn_advantages,
)
from prm_gym.training.config import LossConfig
from prm_gym.training.shaping import combined_returns, is_active, overlong_penalty

HOST = "cpu"
"""Where a batch is built, from the trajectories' host lists; the learner moves it to its device in one copy
(:meth:`prm_gym.training.ddp.Learner.to_device`)."""


@dataclass
class Batch:
    """Right-padded tensors for the learner, one row per trajectory.

    Attributes:
        input_ids, attention_mask, loss_mask, behaviour_logprobs, advantages: ``(B, L)``.
        versions: ``(B,)`` policy version that generated each row.
        stats: scalars for logging (excluded turns/groups, reward means, ...).
    """

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    behaviour_logprobs: Tensor
    advantages: Tensor
    versions: Tensor
    stats: dict[str, float]

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())


def outcome_and_process(traj: Trajectory, outcome_terms: Sequence[str]) -> tuple[float, list[float]]:
    """The episode's outcome return and its per-turn process rewards."""
    outcome, process = 0.0, []
    for turn in traj.turns:
        o = sum(turn.terms.get(t, 0.0) for t in outcome_terms)
        outcome += o
        process.append(turn.reward - o)
    return outcome, process


@dataclass(frozen=True)
class Grouping:
    """How trajectories are grouped: ``groups[i]`` for GRPO; ``trees``/``tasks`` for Tree-GRPO."""

    groups: list[int]
    trees: list[int] | None = None


def shaped_returns(
    trajs: Sequence[Trajectory],
    grouping: Grouping,
    cfg: LossConfig,
    combine: CombineConfig | None = None,
    max_new_tokens: int | None = None,
) -> list[tuple[float, list[float]]]:
    """Per trajectory ``(outcome return, per-turn process rewards)`` after all reward shaping.

    The judge expression's combination options (``combine``) are applied per group first, then
    the overlong penalty (when ``cfg.overlong_buffer > 0`` and ``max_new_tokens`` is given) is
    added to the outcome return.
    """
    split = [outcome_and_process(t, cfg.outcome_terms) for t in trajs]
    if is_active(combine):
        assert combine is not None
        outs, procs = combined_returns([o for o, _ in split], [p for _, p in split], grouping.groups, combine)
        split = list(zip(outs, procs, strict=True))
    if cfg.overlong_buffer > 0 and max_new_tokens is not None:
        split = [
            (o + overlong_penalty(t, max_new_tokens, cfg.overlong_buffer, cfg.overlong_penalty), p)
            for t, (o, p) in zip(trajs, split, strict=True)
        ]
    return split


def compute_advantages(
    trajs: Sequence[Trajectory],
    grouping: Grouping,
    cfg: LossConfig,
    combine: CombineConfig | None = None,
    max_new_tokens: int | None = None,
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """``(turn_adv (N, T), valid (N,), stats)`` for trajectories grouped by ``grouping``.

    ``combine`` and ``max_new_tokens`` enable the shaping of :func:`shaped_returns`.
    """
    n = len(trajs)
    split = shaped_returns(trajs, grouping, cfg, combine, max_new_tokens)
    outcome = torch.tensor([o for o, _ in split], dtype=torch.float64, device=HOST)
    groups = torch.tensor(grouping.groups, dtype=torch.long, device=HOST)
    valid = torch.tensor([not t.infra_error for t in trajs], dtype=torch.bool, device=HOST)
    # a group with fewer than two valid members carries no baseline: exclude it whole
    counts = torch.zeros(int(groups.max()) + 1, dtype=torch.long, device=HOST).index_add_(0, groups, valid.long())
    group_ok = counts[groups] >= 2
    excluded_groups = int((counts < 2).sum())
    valid = valid & group_ok
    if grouping.trees is not None:
        trees = torch.tensor(grouping.trees, dtype=torch.long, device=HOST)
        out_adv = tree_advantages(outcome, trees, groups, valid, scale_by_std=cfg.scale_by_std)
    elif cfg.std_scope == "batch":
        out_adv = batch_std_advantages(outcome, groups, valid)
    else:
        out_adv = group_advantages(outcome, groups, valid, scale_by_std=cfg.scale_by_std)
    width = max((len(t.turns) for t in trajs), default=0)
    process = torch.zeros(n, max(width, 1), dtype=torch.float64, device=HOST)
    tmask = torch.zeros(n, max(width, 1), dtype=torch.bool, device=HOST)
    for i, (traj, (_, proc)) in enumerate(zip(trajs, split, strict=True)):
        for t, (turn, r) in enumerate(zip(traj.turns, proc, strict=True)):
            process[i, t] = r
            tmask[i, t] = bool(valid[i]) and turn.status != "infra_error"
    stats = {
        "excluded_trajectories": float((~valid).sum()),
        "excluded_groups": float(excluded_groups),
        "infra_error_turns": float(sum(t.status == "infra_error" for tr in trajs for t in tr.turns)),
    }
    if cfg.igpo != "off":
        return _igpo_turn_advantages(trajs, split, outcome, process, tmask, groups, cfg), valid, stats
    turn_adv = turn_advantages(
        out_adv,
        process,
        tmask,
        groups,
        gamma=cfg.gamma,
        process_coef=cfg.process_coef,
        scale_by_std=cfg.scale_by_std,
    )
    return turn_adv, valid, stats


def _igpo_turn_advantages(
    trajs: Sequence[Trajectory],
    split: Sequence[tuple[float, list[float]]],
    outcome: Tensor,
    process: Tensor,
    tmask: Tensor,
    groups: Tensor,
    cfg: LossConfig,
) -> Tensor:
    """``--loss.igpo``: each turn's whole reward (the outcome return added to the last turn; an episode
    without an answer, truncated or not terminated, gets ``cfg.igpo_no_answer`` there instead), then
    :func:`prm_gym.training.advantages.igpo_advantages`."""
    rewards = process.clone()
    for i, (traj, (_, proc)) in enumerate(zip(trajs, split, strict=True)):
        if proc:
            last = len(proc) - 1
            answered = traj.terminated and not traj.truncated
            rewards[i, last] = rewards[i, last] + outcome[i] if answered else cfg.igpo_no_answer
    return igpo_advantages(rewards, tmask, groups, mode=cfg.igpo, gamma=cfg.gamma, scale_by_std=cfg.scale_by_std)


def build_batch(
    trajs: Sequence[Trajectory],
    grouping: Grouping,
    cfg: LossConfig,
    pad_id: int = 0,
    *,
    combine: CombineConfig | None = None,
    max_new_tokens: int | None = None,
) -> Batch:
    """Pad ``trajs`` into a :class:`Batch` with per-token advantages; excluded rows get mask 0.

    Args:
        trajs, grouping, cfg: the trajectories, their groups, the loss config.
        pad_id: the padding token id.
        combine: the env judge expression's combination options
            (``env.unwrapped.judge_spec.combine_config()``), applied per group.
        max_new_tokens: the per-turn sampling limit, for the overlong penalty.
    """
    turn_adv, valid, stats = compute_advantages(trajs, grouping, cfg, combine, max_new_tokens)
    length = max(len(t.token_ids) for t in trajs)
    n = len(trajs)
    ids = torch.full((n, length), pad_id, dtype=torch.long, device=HOST)
    attn = torch.zeros(n, length, dtype=torch.long, device=HOST)
    lmask = torch.zeros(n, length, device=HOST)
    blp = torch.zeros(n, length, device=HOST)
    for i, t in enumerate(trajs):
        k = len(t.token_ids)
        ids[i, :k] = torch.tensor(t.token_ids, dtype=torch.long, device=HOST)
        attn[i, :k] = 1
        if valid[i]:
            lmask[i, :k] = torch.tensor(t.loss_mask, dtype=torch.float32, device=HOST)
        blp[i, :k] = torch.tensor(t.logprobs, dtype=torch.float32, device=HOST)
    spans = [[(turn.start, turn.end) for turn in t.turns] for t in trajs]
    adv = spread_to_tokens(turn_adv, spans, length)
    versions = torch.tensor([t.policy_version for t in trajs], dtype=torch.long, device=HOST)
    return Batch(ids, attn, lmask, blp, adv, versions, stats)
