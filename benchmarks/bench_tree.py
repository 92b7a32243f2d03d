"""Tree-GRPO against chain GRPO: generated tokens per trajectory at the same number of leaves.

Both sample with the tiny random model (hf:tiny) on prm/Math-v0 through the real env and
judge. Chain: ``M * (1 + N * L)`` independent episodes per task. Tree: ``M`` trees per task,
``L`` rounds of ``N`` branches forked at turn boundaries, the same number of leaves. Prints
generated tokens per leaf trajectory (median and spread over repetitions) and the ratio.

Accounting: chain counts every sampled token of every episode; tree counts each sampled token
once (a shared prefix is generated once, by the episode that first produced it), divided by the
same number of leaves. Expansion draws among a tree's *distinct* inner nodes (the paper's
"sample N non-leaf nodes"); an earlier version drew (leaf, boundary) pairs, which counted a
shared shallow node once per leaf through it and so over-sampled long suffixes (ratio 0.58).
With uniform choice among distinct nodes the ratio tends to about 0.5 as L grows: it is a
property of where branches start, not of the model.

    .venv/bin/python benchmarks/bench_tree.py
"""

from __future__ import annotations

import statistics

import gymnasium as gym
import numpy as np

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.hf import HFPolicy
from prm_gym.agents.rollout import rollout
from prm_gym.core.policy import SamplingParams
from prm_gym.training.config import TreeConfig
from prm_gym.training.tree import sample_trees

CFG = TreeConfig(num_trees=1, expand_nodes=2, expand_rounds=3)
SAMPLING = SamplingParams(max_new_tokens=16)
TASKS = ["math-train-0-00000", "math-train-0-00001"]


def make_env() -> gym.Env:
    return gym.make("prm/Math-v0", levels=[1], num_tasks=20, max_turns=6)


def chain(policy: HFPolicy, chat: ChatTemplate, rep: int) -> float:
    leaves = CFG.leaves_per_task
    tids = [t for t in TASKS for _ in range(leaves)]
    trajs = rollout([make_env() for _ in tids], policy, chat, seeds=[rep] * len(tids), task_ids=tids, sampling=SAMPLING)
    return sum(t.num_generated_tokens for t in trajs) / len(trajs)


def tree(policy: HFPolicy, chat: ChatTemplate, rep: int) -> float:
    sample = sample_trees(
        make_env, policy, chat, TASKS, [rep] * len(TASKS), CFG, np.random.default_rng(rep), sampling=SAMPLING
    )
    return sample.generated_tokens / len(sample.leaves)


def main() -> None:
    policy = HFPolicy.from_id("hf:tiny", seed=0)
    chat = ChatTemplate(policy.tokenizer)
    chain(policy, chat, 100)  # warm-up
    reps = 3
    c, t = [], []
    for r in range(reps):  # alternated rounds
        c.append(chain(policy, chat, r))
        t.append(tree(policy, chat, r))
    print(f"leaves per task: {CFG.leaves_per_task} (M={CFG.num_trees}, N={CFG.expand_nodes}, L={CFG.expand_rounds})")
    for name, xs in (("chain", c), ("tree", t)):
        print(
            f"{name:<6} generated tokens/trajectory: median {statistics.median(xs):.1f} "
            f"(min {min(xs):.1f}, max {max(xs):.1f})"
        )
    ratio = statistics.median(t) / statistics.median(c)
    print(f"tree/chain ratio: {ratio:.2f} (target <= 0.5)")
    from result_line import emit, spread  # the machine-readable row for run_all.py

    emit(
        "tree",
        "generated tokens per trajectory, tree-GRPO",
        statistics.median(t),
        statistics.median(c),
        "independent chains (same leaves per task); rounds alternated",
        "tokens",
        "lower",
        f"ours {spread(t)}, baseline {spread(c)}",
    )


if __name__ == "__main__":
    main()
