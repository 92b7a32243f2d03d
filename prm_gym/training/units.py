"""The rollout unit: what a rollout source returns for one task, for chains and trees alike.

A chain GRPO group is a unit whose leaves all share group 0 and have no tree index; a Tree-GRPO
task's trees are a unit whose leaves carry their tree index (the intra-tree group) and their task
index (the inter-tree group). The collector's recipes, the staleness filter and the batch see only
this type, so nothing downstream asks which algorithm made a unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prm_gym.agents.rollout import Trajectory
from prm_gym.training.batch import Grouping


@dataclass
class RolloutUnit:
    """One task's trajectories (or a batch's, merged), with what sampling them cost.

    Attributes:
        leaves: every finished trajectory (for trees: the root chains and their branches).
        tasks: the task (GRPO group, Tree-GRPO inter-tree group) index of each leaf.
        trees: the tree index of each leaf (unique across a batch), or None for chain groups.
        generated_tokens: tokens actually sampled (a tree's shared prefixes counted once).
        tool_calls: tool calls executed for new turns (replays not counted; trees only).
        replayed_turns: turns replayed to fork envs (no tokens sampled, verdicts memoised; trees only).
        root_branches: tree branches drawn at the bare prompt because the tree had no non-leaf node.
    """

    leaves: list[Trajectory] = field(default_factory=list)
    tasks: list[int] = field(default_factory=list)
    trees: list[int] | None = None
    generated_tokens: int = 0
    tool_calls: int = 0
    replayed_turns: int = 0
    root_branches: int = 0

    @classmethod
    def chain(cls, trajs: Sequence[Trajectory]) -> RolloutUnit:
        """A chain GRPO group: ``trajs`` of one task, every token of each sampled."""
        trajs = list(trajs)
        return cls(trajs, [0] * len(trajs), None, sum(t.num_generated_tokens for t in trajs))

    @property
    def grouping(self) -> Grouping:
        return Grouping(groups=list(self.tasks), trees=None if self.trees is None else list(self.trees))

    def as_batch(self) -> tuple[list[Trajectory], Grouping, dict[str, float]]:
        """The leaves, their grouping and the sampling budget (trees add their tool and fork counts)."""
        budget = {"generated_tokens": float(self.generated_tokens)}
        if self.trees is not None:
            budget |= {
                "tool_calls": float(self.tool_calls),
                "replayed_turns": float(self.replayed_turns),
                "root_branches": float(self.root_branches),
            }
        return self.leaves, self.grouping, budget


def merge_units(units: Sequence[RolloutUnit]) -> RolloutUnit:
    """One unit of several (one per task, maybe from different workers): task and tree indices
    renumbered so they stay unique, budgets added up. Chain groups and trees are not mixed."""
    is_tree = bool(units) and units[0].trees is not None
    if any((u.trees is not None) != is_tree for u in units):
        raise ValueError("a batch mixes chain groups and trees")
    out = RolloutUnit(trees=[] if is_tree else None)
    for unit in units:
        task0 = len(set(out.tasks))
        out.leaves += unit.leaves
        out.tasks += [task0 + t for t in unit.tasks]
        if out.trees is not None and unit.trees is not None:
            tree0 = len(set(out.trees))
            out.trees += [tree0 + t for t in unit.trees]
        out.generated_tokens += unit.generated_tokens
        out.tool_calls += unit.tool_calls
        out.replayed_turns += unit.replayed_turns
        out.root_branches += unit.root_branches
    return out
