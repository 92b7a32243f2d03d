"""Batches, Tree-GRPO sampling and async collection over the real prm/Math-v0 env."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import rollout
from prm_gym.core.policy import FakePolicy, SamplingParams
from prm_gym.training.asyncrl import Prefetcher, StalenessReport, admit
from prm_gym.training.batch import Grouping, build_batch
from prm_gym.training.config import LossConfig, TreeConfig
from prm_gym.training.tree import sample_trees
from prm_gym.training.units import RolloutUnit, merge_units

KW: dict[str, Any] = {"levels": [1], "num_tasks": 10, "max_turns": 4}


def make_env() -> gym.Env:
    return gym.make("prm/Math-v0", **KW)


def solver(prompt: str, call: int) -> str:
    """Calls the calculator on the problem, then answers with the last tool result; every third
    call answers wrong straight away."""
    if call % 3 == 2:
        return "<answer>-1</answer>"
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt)
    if results:
        return f"<answer>{results[-1]}</answer>"
    expr = re.findall(r"What is (.*?)\?", prompt)[-1]
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expr}"}}}}</tool_call>'


def test_batch_masks_prompt_and_tool_tokens_and_ranks_outcomes(tiny_tokenizer: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer)
    tid = make_env().unwrapped.tasks.ids[0]  # type: ignore[attr-defined]
    trajs = rollout(
        [make_env() for _ in range(2)], FakePolicy(tiny_tokenizer, solver), chat, task_ids=[tid, tid], seeds=[0, 1]
    )
    batch = build_batch(trajs, Grouping([0, 0]), LossConfig(process_coef=0.0))
    for i, t in enumerate(trajs):
        sampled = sum(turn.end - turn.start for turn in t.turns)
        assert int(batch.loss_mask[i].sum()) == sampled  # prompt and tool results never trained
    good = int(np.argmax([t.total_reward for t in trajs]))
    assert trajs[good].total_reward > trajs[1 - good].total_reward
    assert float(batch.advantages[good][batch.loss_mask[good] > 0].min()) > 0
    assert float(batch.advantages[1 - good][batch.loss_mask[1 - good] > 0].max()) < 0


def test_infra_error_trajectories_and_groups_are_excluded(tiny_tokenizer: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer)
    trajs = rollout(
        [make_env() for _ in range(4)],
        FakePolicy(tiny_tokenizer, solver),
        chat,
        task_ids=["math-train-0-00000"] * 2 + ["math-train-0-00001"] * 2,
        seeds=[0, 1, 2, 3],
    )
    trajs[0].turns[-1].status = "infra_error"
    batch = build_batch(trajs, Grouping([0, 0, 1, 1]), LossConfig())
    assert batch.stats["excluded_trajectories"] == 2.0  # the failed one and its lone partner
    assert batch.stats["excluded_groups"] == 1.0
    assert batch.stats["infra_error_turns"] == 1.0
    assert float(batch.loss_mask[:2].sum()) == 0.0
    assert float(batch.loss_mask[2:].sum()) > 0.0


def test_tree_leaves_share_prefixes_and_save_generation(tiny_tokenizer: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer)
    policy = FakePolicy(tiny_tokenizer, ["thinking", "still thinking", "more", "<answer>3</answer>"])
    cfg = TreeConfig(num_trees=2, expand_nodes=2, expand_rounds=2)
    sample = sample_trees(
        make_env,
        policy,
        chat,
        ["math-train-0-00000"],
        [5],
        cfg,
        np.random.default_rng(0),
        sampling=SamplingParams(max_new_tokens=32),
    )
    assert len(sample.leaves) == cfg.leaves_per_task == 10
    assert sorted(set(sample.trees)) == [0, 1] and set(sample.tasks) == {0}
    chains = [leaf for leaf in sample.leaves[:1]]
    for leaf in sample.leaves:
        assert leaf.turns and leaf.task_id == "math-train-0-00000"
        assert leaf.token_ids[: leaf.turns[0].start] == chains[0].token_ids[: chains[0].turns[0].start]
    full = sum(leaf.num_generated_tokens for leaf in sample.leaves)
    assert 0 < sample.generated_tokens < full  # shared prefixes are generated once
    batch = build_batch(sample.leaves, sample.grouping, LossConfig())
    assert batch.input_ids.shape[0] == 10


def test_tree_branches_are_real_env_continuations(tiny_tokenizer: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer)
    sample = sample_trees(
        make_env,
        FakePolicy(tiny_tokenizer, solver),
        chat,
        ["math-train-0-00003"],
        [1],
        TreeConfig(num_trees=1, expand_nodes=3, expand_rounds=1),
        np.random.default_rng(1),
    )
    env = make_env()
    gold = env.unwrapped.tasks.get(  # type: ignore[attr-defined]
        "math-train-0-00003"
    ).answer
    for leaf in sample.leaves:
        if leaf.turns[-1].info["answer"] == gold:
            assert leaf.total_reward >= 1.0  # the real judge scored the branch
    assert sample.tool_calls >= 1


def test_prefetch_with_zero_depth_is_synchronous() -> None:
    calls: list[tuple[int, str]] = []
    pre = Prefetcher(lambda s: calls.append((s, threading.current_thread().name)) or s, depth=0, last=3)
    assert [pre.get(s)[0] for s in range(3)] == [0, 1, 2]
    assert [c[0] for c in calls] == [0, 1, 2] and {c[1] for c in calls} == {threading.current_thread().name}


def test_prefetch_plays_at_most_depth_steps_ahead() -> None:
    started: list[int] = []
    gate = threading.Event()

    def collect(step: int) -> int:
        started.append(step)
        gate.wait(5)
        return step

    pre = Prefetcher(collect, depth=2, last=10)
    try:
        gate.set()
        assert pre.get(0)[0] == 0
        time.sleep(0.2)  # the queued collections of steps 1 and 2 run meanwhile; step 3 is not queued yet
        assert started == [0, 1, 2]
        assert pre.get(1)[0] == 1
        time.sleep(0.2)
        assert started == [0, 1, 2, 3]
    finally:
        pre.close()


def test_admit_reports_lag_and_drops_units_past_the_bound() -> None:
    from types import SimpleNamespace

    def group(*versions: int) -> RolloutUnit:
        return RolloutUnit([SimpleNamespace(policy_version=v) for v in versions])  # type: ignore[misc]

    report = StalenessReport()
    kept = admit([group(5, 5), group(4, 5), group(2, 5)], 5, 1, "drop", report)
    assert len(kept) == 2 and report.staleness == [0, 1] and report.dropped == 1
    report = StalenessReport()
    assert len(admit([group(2)], 5, 1, "correct", report)) == 1 and report.staleness == [3]


def test_rollout_token_ids_unchanged_by_continue_refactor(tiny_tokenizer: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer)
    t = rollout([make_env()], FakePolicy(tiny_tokenizer, solver), chat, task_ids=["math-train-0-00002"], seeds=[0])[0]
    assert t.terminated and t.total_reward >= 1.0
    assert torch.tensor(t.loss_mask).sum() == sum(turn.end - turn.start for turn in t.turns)


def test_merged_units_keep_trees_and_tasks_apart() -> None:
    def one(n_trees: int, leaves_per_tree: int, tokens: int) -> RolloutUnit:
        trees = [t for t in range(n_trees) for _ in range(leaves_per_tree)]
        return RolloutUnit([object()] * len(trees), [0] * len(trees), trees, tokens)  # type: ignore[list-item]

    merged = merge_units([one(2, 2, 10), one(1, 3, 5)])
    assert merged.trees == [0, 0, 1, 1, 2, 2, 2] and merged.tasks == [0, 0, 0, 0, 1, 1, 1]
    assert merged.generated_tokens == 15 and merged.grouping.groups == merged.tasks
    assert set(merged.as_batch()[2]) == {"generated_tokens", "tool_calls", "replayed_turns", "root_branches"}


def test_merged_chain_groups_number_their_groups_and_refuse_trees() -> None:
    from types import SimpleNamespace

    def group(n: int) -> RolloutUnit:
        return RolloutUnit.chain([SimpleNamespace(num_generated_tokens=3) for _ in range(n)])  # type: ignore[misc]

    trajs, grouping, budget = merge_units([group(2), group(3)]).as_batch()
    assert len(trajs) == 5 and grouping.groups == [0, 0, 1, 1, 1] and grouping.trees is None
    assert budget == {"generated_tokens": 15.0}
    with pytest.raises(ValueError, match="mixes"):
        merge_units([group(2), RolloutUnit([], [], [])])
