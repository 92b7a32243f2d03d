"""Advantages as pure tensor functions: group-relative, turn-level and tree-level.

Conventions: a batch holds ``N`` trajectories; ``groups[i]`` is the group index of
trajectory ``i`` (a GRPO group, a tree, or all trees of a task); ``valid[i]`` is False for
trajectories excluded from the statistics (an ``infra_error`` turn), whose advantage is 0.
Per-turn tensors are ``(N, T)`` padded, with ``turn_mask`` marking real, valid turns.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _group_stats(values: Tensor, groups: Tensor, weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-element (mean, std, count) of its group, over the elements with weight 1."""
    num = int(groups.max().item()) + 1 if groups.numel() else 0
    w = weight.to(values.dtype)
    count = values.new_zeros(num).index_add_(0, groups, w)
    total = values.new_zeros(num).index_add_(0, groups, values * w)
    mean = total / count.clamp(min=1)
    sq = values.new_zeros(num).index_add_(0, groups, (values - mean[groups]) ** 2 * w)
    std = (sq / (count - 1).clamp(min=1)).sqrt()
    return mean[groups], std[groups], count[groups]


def group_advantages(
    rewards: Tensor,
    groups: Tensor,
    valid: Tensor | None = None,
    *,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Group-relative advantages ``(r - mean_group) / (std_group + eps)``.

    Args:
        rewards: ``(N,)`` returns.
        groups: ``(N,)`` long group index of each return.
        valid: ``(N,)`` bool; invalid returns are left out of the mean/std and get 0. A group
            with fewer than two valid members gets 0 everywhere.
        scale_by_std: divide by the group std (the sample std, ddof=1); False keeps the centred
            rewards (Dr.GRPO).
        eps: added to the std.

    Returns:
        ``(N,)`` advantages.
    """
    rewards = rewards.to(torch.float64)
    valid = torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid.bool()
    mean, std, count = _group_stats(rewards, groups.long(), valid)
    adv = rewards - mean
    if scale_by_std:
        adv = adv / (std + eps)
    keep = valid & (count >= 2)
    return torch.where(keep, adv, torch.zeros_like(adv)).float()


def batch_std_advantages(rewards: Tensor, groups: Tensor, valid: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """Group-mean centred returns divided by the std of the centred returns over the whole batch.

    The "Lite PPO" normalisation (Liu et al. 2025, *Tricks or Traps? A Deep Dive into RL for LLM
    Reasoning*): the group mean is the baseline, but the scale is one batch-level std, so a
    near-constant group is not blown up by its own tiny std.

    Args:
        rewards, groups, valid: as in :func:`group_advantages`.
        eps: added to the std.
    """
    centred = group_advantages(rewards, groups, valid, scale_by_std=False).to(torch.float64)
    valid = torch.ones_like(centred, dtype=torch.bool) if valid is None else valid.bool()
    if int(valid.sum()) < 2:
        return centred.float()
    std = centred[valid].std(unbiased=True)
    return (centred / (std + eps)).float()


def reward_to_go(rewards: Tensor, turn_mask: Tensor, gamma: float = 1.0) -> Tensor:
    """``G_t = r_t + gamma * G_{t+1}`` along the last dim, counting only masked turns.

    Args:
        rewards: ``(N, T)`` per-turn rewards.
        turn_mask: ``(N, T)`` bool; masked-out turns contribute 0.
        gamma: the discount.
    """
    r = torch.where(turn_mask.bool(), rewards.to(torch.float64), rewards.new_zeros((), dtype=torch.float64))
    out = torch.zeros_like(r)
    running = r.new_zeros(r.shape[0])
    for t in range(r.shape[1] - 1, -1, -1):
        running = r[:, t] + gamma * running
        out[:, t] = running
    return out


def turn_advantages(
    outcome_adv: Tensor,
    process_rewards: Tensor,
    turn_mask: Tensor,
    groups: Tensor,
    *,
    gamma: float = 1.0,
    process_coef: float = 1.0,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Per-turn advantages: the trajectory's outcome advantage plus normalised process reward-to-go.

    The process part is ``(G_t - b) / s`` where ``G_t`` is the discounted reward-to-go of the
    per-turn process rewards and ``b``, ``s`` are the mean and std of ``G`` over *all* valid
    turns of the group, pooled across turn indices. A per-turn-index baseline would be biased
    when the policy decides when to stop (late indices only exist in long episodes).

    Args:
        outcome_adv: ``(N,)`` outcome advantages (from :func:`group_advantages`).
        process_rewards: ``(N, T)`` per-turn process rewards, padded.
        turn_mask: ``(N, T)`` bool, True on real turns of valid trajectories.
        groups: ``(N,)`` group index of each trajectory.
        gamma: discount of the reward-to-go.
        process_coef: weight of the process part (0: outcome only).
        scale_by_std: divide the process part by the pooled std.
        eps: added to the std.

    Returns:
        ``(N, T)`` advantages, 0 on masked turns.
    """
    mask = turn_mask.bool()
    rtg = reward_to_go(process_rewards, mask, gamma)
    n, t = rtg.shape
    flat_groups = groups.long()[:, None].expand(n, t).reshape(-1)
    mean, std, count = _group_stats(rtg.reshape(-1), flat_groups, mask.reshape(-1))
    proc = rtg.reshape(-1) - mean
    if scale_by_std:
        proc = torch.where(std > eps, proc / (std + eps), torch.zeros_like(proc))
    proc = torch.where(count >= 2, proc, torch.zeros_like(proc)).reshape(n, t)
    adv = outcome_adv.to(torch.float64)[:, None] + process_coef * proc
    return torch.where(mask, adv, torch.zeros_like(adv)).float()


def _igpo_stats(values: Tensor, groups: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-element (mean, std) of its group over the masked elements, as the authors compute them:
    the population std ``sqrt(var + 1e-8)``, and std 1 where a group has at most one element."""
    mean, sample_std, count = _group_stats(values, groups, mask)
    var = sample_std**2 * (count - 1).clamp(min=1) / count.clamp(min=1)  # ddof=1 -> ddof=0
    std = (var + 1e-8).sqrt()
    return mean, torch.where(count <= 1, torch.ones_like(std), std)


def igpo_advantages(
    rewards: Tensor,
    turn_mask: Tensor,
    groups: Tensor,
    *,
    mode: str = "joint",
    gamma: float = 1.0,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """IGPO's per-turn advantages (Wang et al. 2025, arXiv 2510.14967), as the authors compute them.

    Each trajectory's last real turn carries its outcome, every earlier turn its information gain.
    Following ``compute_grpo_outcome_advantage`` in ``verl/trainer/ppo/core_algos.py`` of
    GuoqingWang1/IGPO at ``49a8c4e`` (its steps 1-5):

    1. the outcome positions are each trajectory's last turn; the gain positions the other turns
       whose reward is not exactly 0 (a gain of exactly 0 stays 0 and is left out of the statistics;
       the authors also merge such a turn into the next one, which gives the same advantages when
       ``gamma = 1``, their scripts' value);
    2. per group, the rewards are z-scored *before* any sum: ``mode="joint"`` pools outcomes and
       gains, ``mode="separate"`` z-scores the outcomes among themselves and the gains among
       themselves; the std is the population std ``sqrt(var + 1e-8)`` (1 for a group with at most
       one such reward) and the division, ``/ (std + eps)``, is skipped with ``scale_by_std=False``
       (the authors' ``norm_adv_by_std_in_grpo``);
    3. the advantage of turn ``t`` is the discounted sum of the normalised rewards from ``t`` on,
       ``A_t = r~_t + gamma * A_{t+1}``, and nothing else (no separate outcome advantage).

    The weight of a judge that gives both parts is normalised away in both modes; the strength of the
    gains against the outcome is fixed by the z-scoring (``separate``: equal unit scales; ``joint``:
    their spread in the pooled group).

    Args:
        rewards: ``(N, T)`` per-turn rewards (gains, then the outcome on the last turn), padded.
        turn_mask: ``(N, T)`` bool, True on real turns of valid trajectories.
        groups: ``(N,)`` group index of each trajectory.
        mode: ``"joint"`` or ``"separate"``.
        gamma: the discount of the sum.
        scale_by_std: divide by the std.
        eps: added to the std.

    Returns:
        ``(N, T)`` advantages, 0 on masked turns.
    """
    if mode not in ("joint", "separate"):
        raise ValueError(f"mode must be 'joint' or 'separate', not {mode!r}")
    mask = turn_mask.bool()
    r = torch.where(mask, rewards.to(torch.float64), rewards.new_zeros((), dtype=torch.float64))
    n, t = r.shape
    last_idx = (mask.long() * torch.arange(1, t + 1, device=r.device)).argmax(dim=1)  # the last real turn of each row
    last = torch.zeros_like(mask)
    last[torch.arange(n, device=r.device), last_idx] = mask.any(dim=1)
    gain = mask & ~last & (r != 0)
    flat_r, flat_g = r.reshape(-1), groups.long()[:, None].expand(n, t).reshape(-1)
    normed = torch.zeros_like(flat_r)
    parts = [last | gain] if mode == "joint" else [last, gain]
    for part in parts:
        flat = part.reshape(-1)
        mean, std = _igpo_stats(flat_r, flat_g, flat)
        z = (flat_r - mean) / (std + eps) if scale_by_std else flat_r - mean
        normed = torch.where(flat, z, normed)
    adv = reward_to_go(normed.reshape(n, t), mask, gamma)
    return torch.where(mask, adv, torch.zeros_like(adv)).float()


def tree_advantages(
    rewards: Tensor,
    trees: Tensor,
    tasks: Tensor,
    valid: Tensor | None = None,
    *,
    scale_by_std: bool = True,
) -> Tensor:
    """Tree-GRPO leaf advantages (Ji et al. 2025, arXiv 2509.21240, section 3.2).

    For leaf ``H`` of tree ``T_j`` of a task whose M trees hold the leaves ``T``:

    * intra-tree: ``A_intra(H) = (R(H) - mean{R(H') : H' in T_j}) / std{R(H') : H' in T_j}``;
    * inter-tree: ``A_inter(H) = (R(H) - mean{R(H') : H' in T}) / std{R(H') : H' in T}``;
    * the leaf's advantage is their sum, ``A_tree(H) = A_intra(H) + A_inter(H)``, applied to every
      token of the leaf's path (its shared prefix included, so a shared node's tokens are pushed
      by every leaf below it: the paper's implicit step-level preference).

    The std is the sample std (``ddof=1``) plus ``eps``, as in :func:`group_advantages`; a tree with a
    single valid leaf has ``A_intra = 0``; ``scale_by_std=False`` drops both divisions (Dr. GRPO).

    Args:
        rewards: ``(N,)`` leaf returns.
        trees: ``(N,)`` index of each leaf's tree (unique across tasks).
        tasks: ``(N,)`` index of each leaf's task (the inter-tree group).
        valid: ``(N,)`` bool, False for leaves excluded from the statistics.
        scale_by_std: as in :func:`group_advantages`.
    """
    intra = group_advantages(rewards, trees, valid, scale_by_std=scale_by_std)
    inter = group_advantages(rewards, tasks, valid, scale_by_std=scale_by_std)
    return intra + inter


def spread_to_tokens(turn_adv: Tensor, spans: list[list[tuple[int, int]]], length: int) -> Tensor:
    """``(N, length)`` per-token advantages: each turn's advantage over its ``[start, end)`` span.

    Args:
        turn_adv: ``(N, T)`` per-turn advantages.
        spans: per trajectory, the token span of each turn.
        length: the padded token length.
    """
    out = turn_adv.new_zeros((len(spans), length), dtype=torch.float32)
    for i, row in enumerate(spans):
        for t, (start, end) in enumerate(row):
            out[i, start:end] = turn_adv[i, t]
    return out
