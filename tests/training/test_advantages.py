"""Advantages on tiny hand-checked cases."""

from __future__ import annotations

import math

import torch

from prm_gym.training.advantages import (
    group_advantages,
    reward_to_go,
    spread_to_tokens,
    tree_advantages,
    turn_advantages,
)


def test_group_advantages_std_scaled_by_hand() -> None:
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = group_advantages(r, g)
    std = math.sqrt(((0.5**2) * 4) / 3)  # sample std of [1, 0, 0, 1]
    assert torch.allclose(adv[:4], torch.tensor([0.5, -0.5, -0.5, 0.5]) / (std + 1e-6), atol=1e-5)
    assert torch.equal(adv[4:], torch.zeros(2))  # no spread: no signal


def test_group_advantages_without_std_is_centred() -> None:
    adv = group_advantages(torch.tensor([3.0, 1.0]), torch.tensor([0, 0]), scale_by_std=False)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0]))


def test_invalid_members_are_excluded_from_stats_and_zeroed() -> None:
    r = torch.tensor([1.0, 0.0, 100.0, 5.0, 7.0])
    g = torch.tensor([0, 0, 0, 1, 1])
    valid = torch.tensor([True, True, False, True, False])
    adv = group_advantages(r, g, valid, scale_by_std=False)
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0, 0.0, 0.0]))  # group 1 has one valid member


def test_reward_to_go_discounted_and_masked() -> None:
    r = torch.tensor([[1.0, 2.0, 4.0], [1.0, 1.0, 9.0]])
    m = torch.tensor([[True, True, True], [True, True, False]])
    out = reward_to_go(r, m, gamma=0.5)
    assert torch.allclose(out.float(), torch.tensor([[1 + 0.5 * (2 + 0.5 * 4), 2 + 2.0, 4.0], [1.5, 1.0, 0.0]]))


def test_turn_advantages_pooled_baseline_does_not_depend_on_turn_index() -> None:
    # two trajectories of one group: process rewards [1, 0] and [0]; reward-to-go [1, 0] and [0]
    proc = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    out = turn_advantages(torch.tensor([0.5, -0.5]), proc, mask, torch.tensor([0, 0]), scale_by_std=False)
    b = 1 / 3  # mean over all three valid turns, not per index (index 0 alone would give 0.5)
    expected = torch.tensor([[0.5 + 1 - b, 0.5 - b], [-0.5 - b, 0.0]])
    assert torch.allclose(out, expected, atol=1e-6)


def test_turn_advantages_zero_process_leaves_outcome() -> None:
    out = turn_advantages(
        torch.tensor([1.0, -1.0]), torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), torch.tensor([0, 0])
    )
    assert torch.allclose(out, torch.tensor([[1.0] * 3, [-1.0] * 3]))


def test_tree_advantages_sum_intra_and_inter() -> None:
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    trees = torch.tensor([0, 0, 1, 1])
    tasks = torch.tensor([0, 0, 0, 0])
    adv = tree_advantages(r, trees, tasks, scale_by_std=False)
    # intra: tree0 [0.5, -0.5], tree1 [0, 0]; inter: mean 0.75 -> [0.25, -0.75, 0.25, 0.25]
    assert torch.allclose(adv, torch.tensor([0.75, -1.25, 0.25, 0.25]))


def test_tree_advantages_are_the_papers_equations_with_std() -> None:
    """Ji et al. 2025 section 3.2: (R - mean_tree)/std_tree + (R - mean_task)/std_task, per task."""
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.0, 1.0])
    trees = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    tasks = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1])
    adv = tree_advantages(r, trees, tasks)
    expect = torch.zeros(9)
    for group in (trees, tasks):
        for g in group.unique():
            m = group == g
            expect[m] += (r[m] - r[m].mean()) / (r[m].std() + 1e-6)
    assert torch.allclose(adv, expect, atol=1e-5)
    # one task of one tree: the inter-tree group equals the tree, so the advantage is twice GRPO's
    one = tree_advantages(r[:3], trees[:3], tasks[:3])
    assert torch.allclose(one, 2 * (r[:3] - r[:3].mean()) / (r[:3].std() + 1e-6), atol=1e-5)


def test_spread_to_tokens_fills_turn_spans_only() -> None:
    out = spread_to_tokens(torch.tensor([[2.0, -1.0]]), [[(1, 3), (5, 6)]], 7)
    assert out.tolist() == [[0.0, 2.0, 2.0, 0.0, 0.0, -1.0, 0.0]]
