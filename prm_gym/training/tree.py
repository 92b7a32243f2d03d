"""Tree-GRPO sampling: trees whose nodes are whole agent turns, branched by forking the env.

Ji et al. 2025, *Tree Search for LLM Agent Reinforcement Learning* (arXiv 2509.21240), section 3.1,
whose three steps this module follows:

* **Initialization**: per task, ``num_trees`` (M) independent chains ``H ~ pi_theta(. | x)``; each
  is the backbone of one tree, one node per agent turn (thought, action, observation).
* **Sampling**: per tree, ``expand_nodes`` (N) *non-leaf* nodes drawn uniformly at random among the
  tree's distinct nodes, from every depth: the tree's first turn included, branches added in earlier
  rounds included, the last turn of an episode (a leaf) excluded; the root (the bare prompt) is
  included in the authors' code and here with ``TreeConfig.expand_root`` (below).
* **Expansion**: from a chosen node ``p`` the context root .. ``p`` (``p`` included) is kept and the
  rest ``H_{>=t} ~ pi_theta(. | x, H_{<t})`` is sampled to a leaf and added as a new branch. The env is
  forked (``env.unwrapped.fork()`` replays the kept turns with memoised verdicts) and the episode
  continues from the prefix's token ids, so siblings share their prefix tokens and only the suffix
  is generated. Sampling and expansion repeat ``expand_rounds`` (L) times: ``M * (1 + N*L)`` leaves.

In the code a node is named by the *boundary* after it: boundary ``k`` keeps turns ``0..k-1``, so
the tree's first turn is boundary 1 and the candidates are boundaries ``1..T-1`` of a ``T``-turn
leaf. Boundary 0 is the tree's root, the bare prompt. The authors' code makes the root a candidate:
``TreeNode.get_expand_node`` starts its candidate set with the root itself (``candidate_set = [self]``,
``search_r1/llm_agent/tree_node.py:136`` of AMAP-ML/Tree-GRPO at 90b1709; the root is the prompt node
built with ``is_root=True`` in ``search_r1/llm_agent/generation_ts.py:575-590``), then draws with
``random.choices`` (line 140: uniformly, with replacement). ``TreeConfig.expand_root=True`` runs that
rule: the root is a candidate every round, and a branch drawn there is one more chain from the prompt
(counted in ``root_branches``). The default (``expand_root=False``, this project's variant, kept
under its own name) leaves the root out and uses it only when a tree has no non-leaf node at all
(every leaf answered in one turn); then the tree still gets its N leaves, as fresh chains, counted
in ``root_branches``. ``TreeConfig.expand_with_replacement=True`` draws with replacement as the
authors' code does (default: without replacement, unless a tree has fewer than N candidates).
Leaves are scored with the paper's intra-tree plus
inter-tree advantages (:func:`prm_gym.training.advantages.tree_advantages`). Works over any
:class:`prm_gym.envs.base.ToolEnv`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import Trajectory, continue_rollout, rollout, tool_calls
from prm_gym.core.policy import Policy, SamplingParams
from prm_gym.core.seams import trainer_env
from prm_gym.training.config import TreeConfig
from prm_gym.training.units import RolloutUnit

DEFAULT_SAMPLING = SamplingParams()


def _prefix(traj: Trajectory, k: int) -> Trajectory:
    """``traj`` cut at the boundary before turn ``k`` (its prompt alone when k = 0)."""
    start = traj.turns[k].start
    return Trajectory(
        task_id=traj.task_id,
        prompt=traj.prompt,
        token_ids=traj.token_ids[:start],
        loss_mask=traj.loss_mask[:start],
        logprobs=traj.logprobs[:start],
        turns=traj.turns[:k],
        policy_version=traj.policy_version,
        seed=traj.seed,
    )


def tree_nodes(
    leaves: Sequence[Trajectory], forked_at: dict[int, int], *, root: bool = False
) -> list[tuple[Trajectory, int]]:
    """The tree's distinct non-leaf nodes as ``(leaf, k)``: the node is turn ``k-1`` of ``leaf``, and
    expanding it keeps turns ``0..k-1`` (the boundary before turn ``k``), as in the paper's expansion.

    ``forked_at[id(leaf)]`` is the boundary a leaf was forked at (0 for the root chain); the
    leaf shares turns ``< forked_at`` with its parent, so only its boundaries after the fork are new
    nodes. ``k`` runs to ``len(turns) - 1``: the last turn is the leaf itself. Boundary 0 (the root,
    the bare prompt) is a candidate only with ``root=True`` (the authors' code,
    ``search_r1/llm_agent/tree_node.py:136``), once, first.
    """
    nodes = [(leaf, k) for leaf in leaves for k in range(max(1, forked_at[id(leaf)] + 1), len(leaf.turns))]
    return [(leaves[0], 0), *nodes] if root and leaves else nodes


def _fork_at(root: Any, traj: Trajectory, k: int) -> Any:
    env = root.fork()
    for turn in traj.turns[:k]:
        env.step(turn.action)
    return env


def sample_trees(
    make_env: Callable[[], gym.Env],
    policy: Policy,
    chat: ChatTemplate,
    task_ids: Sequence[str],
    seeds: Sequence[int],
    cfg: TreeConfig,
    rng: np.random.Generator,
    *,
    sampling: SamplingParams = DEFAULT_SAMPLING,
    max_context_tokens: int = 4096,
) -> RolloutUnit:
    """Grow ``cfg.num_trees`` trees for each task and return their leaves.

    Args:
        make_env: builds a fresh env (``gym.make`` with the run's kwargs).
        policy, chat, sampling, max_context_tokens: as in :func:`prm_gym.agents.rollout.rollout`.
        task_ids: the tasks; ``seeds[i]`` is the reset seed of task ``i``'s trees.
        cfg: the tree shape.
        rng: chooses the boundaries to expand.
    """
    out = RolloutUnit()
    m = cfg.num_trees
    envs: list[Any] = []
    try:
        envs.extend(make_env() for _ in range(len(task_ids) * m))  # those made before one fails are closed too
        roots_tasks = [tid for tid in task_ids for _ in range(m)]
        roots_seeds = [s for s in seeds for _ in range(m)]
        chains = rollout(
            envs,
            policy,
            chat,
            seeds=roots_seeds,
            task_ids=roots_tasks,
            sampling=sampling,
            max_context_tokens=max_context_tokens,
        )
        bases = [trainer_env(e, fork=True, where="tree-grpo") for e in envs]
        for b, tid, s in zip(bases, roots_tasks, roots_seeds, strict=True):
            b.reset(seed=s, options={"task_id": tid})
        tree_leaves: list[list[Trajectory]] = [[c] for c in chains]
        forked_at: dict[int, int] = {id(c): 0 for c in chains}
        for traj in chains:
            out.generated_tokens += traj.num_generated_tokens
            out.tool_calls += tool_calls(traj.turns)
        for _ in range(cfg.expand_rounds):
            _expand_round(bases, tree_leaves, forked_at, policy, chat, cfg, rng, out, sampling, max_context_tokens)
        out.leaves = [leaf for leaves in tree_leaves for leaf in leaves]
        out.trees = [tree for tree, leaves in enumerate(tree_leaves) for _ in leaves]
        out.tasks = [tree // m for tree in out.trees]
    finally:  # closed even when a rollout or an expansion raises
        for e in envs:
            e.close()
    return out


def _expand_round(
    bases: list[Any],
    tree_leaves: list[list[Trajectory]],
    forked_at: dict[int, int],
    policy: Policy,
    chat: ChatTemplate,
    cfg: TreeConfig,
    rng: np.random.Generator,
    out: RolloutUnit,
    sampling: SamplingParams,
    max_context_tokens: int,
) -> None:
    """One round of the paper's Sampling and Expansion: ``cfg.expand_nodes`` branches per tree, all
    sampled in one batched rollout.

    The candidates are the tree's distinct non-leaf nodes (:func:`tree_nodes`; the root too with
    ``cfg.expand_root``), drawn uniformly without replacement (with replacement when the tree has
    fewer than N, or always with ``cfg.expand_with_replacement``, the authors' ``random.choices``);
    counting a shared node once per leaf would over-sample the shallow nodes.
    """
    forks: list[Any] = []
    try:
        prefixes: list[Trajectory] = []
        owners: list[int] = []
        for tree, leaves in enumerate(tree_leaves):
            # boundaries after turn k-1, before turn k; k = 0 (the root) only with cfg.expand_root
            nodes = tree_nodes(leaves, forked_at, root=cfg.expand_root)
            if not nodes:  # every leaf ended after one turn: no non-leaf node, so fresh chains
                nodes = [(leaves[0], 0)]
            replace = cfg.expand_with_replacement or len(nodes) < cfg.expand_nodes
            picks = rng.choice(len(nodes), size=cfg.expand_nodes, replace=replace)
            for p in picks:
                leaf, k = nodes[int(p)]
                out.root_branches += int(k == 0)  # a branch at the bare prompt: one more chain
                forks.append(_fork_at(bases[tree], leaf, k))
                out.replayed_turns += k
                prefixes.append(_prefix(leaf, k))
                owners.append(tree)
        branches = continue_rollout(
            forks, prefixes, policy, chat, sampling=sampling, max_context_tokens=max_context_tokens
        )
        for tree, prefix, branch in zip(owners, prefixes, branches, strict=True):
            new_turns = branch.turns[len(prefix.turns) :]
            out.generated_tokens += branch.num_generated_tokens - prefix.num_generated_tokens
            out.tool_calls += tool_calls(new_turns)
            tree_leaves[tree].append(branch)
            forked_at[id(branch)] = len(prefix.turns)
    finally:  # the forks' sandboxes and connections go even when a branch raises
        for env in forks:
            env.close()
