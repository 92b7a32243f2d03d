"""Tree-GRPO's root (the bare prompt) as an expansion candidate: the authors' rule
(AMAP-ML/Tree-GRPO search_r1/llm_agent/tree_node.py:136) with ``TreeConfig.expand_root``, never without it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.core.policy import FakePolicy
from prm_gym.training.config import TreeConfig
from prm_gym.training.tree import sample_trees, tree_nodes


def _leaf(turns: int) -> Trajectory:
    recs = [TurnRecord(f"a{i}", "o", 0.0, {}, "ok", 2 * i + 1, 2 * i + 2, {}) for i in range(turns)]
    return Trajectory("t", "p", token_ids=list(range(2 * turns + 1)), turns=recs)


def test_tree_nodes_list_the_root_only_with_the_option() -> None:
    chain, branch = _leaf(3), _leaf(3)
    forked = {id(chain): 0, id(branch): 1}
    off = [k for _, k in tree_nodes([chain, branch], forked)]
    on = [(leaf, k) for leaf, k in tree_nodes([chain, branch], forked, root=True)]
    assert off == [1, 2, 2] and 0 not in off
    assert on[0] == (chain, 0) and [k for _, k in on] == [0, 1, 2, 2]  # the root once, then the same nodes
    one = _leaf(1)  # an episode answered in one turn has no non-leaf node: only the root, when asked
    assert tree_nodes([one], {id(one): 0}) == [] and tree_nodes([one], {id(one): 0}, root=True) == [(one, 0)]


def _kept(sample: Any) -> int:
    root, branch = sample.leaves
    return next((k for k in range(len(root.turns)) if branch.turns[k].action != root.turns[k].action), 0)


def test_the_root_is_drawn_with_expand_root_and_never_without(tiny_tokenizer: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer)

    def make_env() -> gym.Env:
        return gym.make("prm/Math-v0", levels=[1], num_tasks=4, max_turns=3)

    def grow(cfg: TreeConfig, seed: int) -> Any:
        # the branch's first action differs from the chain's only when it restarts at the prompt
        policy = FakePolicy(tiny_tokenizer, lambda prompt, call: f"step {call}")
        return sample_trees(make_env, policy, chat, ["math-train-0-00000"], [0], cfg, np.random.default_rng(seed))

    on, off = TreeConfig(num_trees=1, expand_root=True), TreeConfig(num_trees=1)
    kept_on, roots_on = set(), 0
    for seed in range(12):
        sample = grow(on, seed)
        kept_on.add(_kept(sample))
        roots_on += sample.root_branches
        plain = grow(off, seed)
        assert _kept(plain) >= 1 and plain.root_branches == 0
    assert kept_on == {0, 1, 2}  # the root, the first turn and the second: all candidates
    assert roots_on == sum(1 for s in range(12) if _kept(grow(on, s)) == 0) > 0
