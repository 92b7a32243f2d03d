"""The proof-of-learning pipeline: compact tool prompt, real-env demonstrations, tree node choice, the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from experiments.demo import ENV_KWARGS, demonstrations
from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.policy import FakePolicy
from prm_gym.training.config import TreeConfig
from prm_gym.training.tree import sample_trees, tree_nodes


def test_compact_tools_prompt_is_short_and_names_the_tool(tiny_tokenizer: Any) -> None:
    env = gym.make("prm/Math-v0")
    obs, info = env.reset(seed=0)
    full = ChatTemplate(tiny_tokenizer).prompt_ids(obs, info["tools"])
    compact_chat = ChatTemplate(tiny_tokenizer, tools_block="compact")
    compact = compact_chat.prompt_ids(obs, info["tools"])
    assert len(compact) < len(full) / 2
    assert "calculator(expression)" in compact_chat.system_message(info["tools"])
    assert "<tool_call>" in compact_chat.system_message(info["tools"])
    with pytest.raises(ValueError, match="tools_block"):
        ChatTemplate(tiny_tokenizer, tools_block="tiny")


def _assistant_spans(tokens: list[int], mask: list[int]) -> list[list[int]]:
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append(tokens[start:i])
            start = None
    return spans


@pytest.mark.parametrize("levels", [(1,), (1, 2)])
def test_the_demos_demonstrations_never_guess_by_default(tiny_tokenizer: Any, levels: tuple[int, ...]) -> None:
    """make demo's warm start (issue 44, item 5): every demonstration calls the calculator with the
    task's expression and answers its result, which the env judges correct; none plants a guess."""
    from experiments.demo import env_kwargs, parse_args

    assert parse_args([]).tool_fraction == 1.0
    chat = ChatTemplate(tiny_tokenizer, tools_block="compact")
    demos = demonstrations(chat, 24, seed=0, levels=levels)
    env = gym.make("prm/Math-v0", **env_kwargs(levels))
    tasks = getattr(env.unwrapped, "tasks")  # noqa: B009
    ids = list(tasks.ids)
    assert len(demos) == 24
    for k, (tokens, mask) in enumerate(demos):
        first, last = [tiny_tokenizer.decode(s, skip_special_tokens=True) for s in _assistant_spans(tokens, mask)]
        assert first.startswith("<tool_call>") and '"calculator"' in first
        assert last == f"<answer>{tasks.get(ids[k % len(ids)]).answer}</answer>"


def test_a_planted_guess_says_so_in_one_line() -> None:
    from experiments.demo import PLANTED

    line = PLANTED.format(share=0.5, fraction=0.5)
    assert "\n" not in line and "repair of that planted defect" in line and "50%" in line


def test_grpo_minus_sft_is_paired_per_task_with_a_t_interval() -> None:
    from experiments.demo import gain_line, paired_gain

    sft: list[dict[str, Any]] = [{"task_id": str(i), "success": float(i < 5)} for i in range(10)]
    grpo: list[dict[str, Any]] = [{"task_id": str(i), "success": float(2 <= i < 9)} for i in range(10)]
    gain = paired_gain(sft, grpo)
    assert gain["mean"] == pytest.approx(0.2) and gain["df"] == 9 and gain["unit"] == "task"
    assert gain["lo"] < 0 < gain["hi"] and gain["verdict"] == "no detectable difference"
    assert gain_line(gain).startswith("GRPO minus SFT: +20.0 points, 95% interval [")
    templated = [{**r, "template": f"t{int(r['task_id']) % 3}"} for r in grpo]
    assert paired_gain([{**r, "template": f"t{int(r['task_id']) % 3}"} for r in sft], templated)["df"] == 2
    with pytest.raises(ValueError, match="different tasks"):
        paired_gain(sft, grpo[:5])


def test_planted_demonstrations_replay_to_their_rewards_in_the_real_env(tiny_tokenizer: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer, tools_block="compact")
    demos = demonstrations(chat, 12, seed=3, tool_fraction=0.5)
    env = gym.make("prm/Math-v0", **ENV_KWARGS)
    ids = list(getattr(env.unwrapped, "tasks").ids)  # noqa: B009
    tool_demos = 0
    for k, (tokens, mask) in enumerate(demos):
        assert len(tokens) == len(mask)
        obs, info = env.reset(seed=k, options={"task_id": ids[k % len(ids)]})
        prompt = chat.prompt_ids(obs, info["tools"])
        assert tokens[: len(prompt)] == prompt and not any(mask[: len(prompt)])
        spans = _assistant_spans(tokens, mask)  # replayed through a fresh env
        reward = 0.0
        for span in spans:
            obs, r, term, trunc, _ = env.step(tiny_tokenizer.decode(span, skip_special_tokens=True))
            reward += float(r)
        assert term
        if len(spans) == 2:  # calculator route: always right
            tool_demos += 1
            assert reward == pytest.approx(1.0)
    assert 0 < tool_demos < len(demos)


def test_tree_nodes_are_distinct_prefixes(tiny_tokenizer: Any) -> None:
    """A branch forked at boundary f shares its boundaries <= f with its parent: they must not
    be candidates twice (that over-samples shallow nodes and inflates generated tokens)."""
    chat = ChatTemplate(tiny_tokenizer)

    def make_env() -> gym.Env:
        return gym.make("prm/Math-v0", levels=[1], num_tasks=4, max_turns=4)

    policy = FakePolicy(tiny_tokenizer, lambda prompt, call: f"step {call}")
    sample = sample_trees(
        make_env,
        policy,
        chat,
        ["math-train-0-00000"],
        [0],
        TreeConfig(num_trees=1, expand_nodes=2, expand_rounds=2),
        np.random.default_rng(0),
    )
    root, branches = sample.leaves[0], sample.leaves[1:]
    forked = {id(root): 0}
    for b in branches:
        # the fork point is the longest turn-prefix shared with an earlier leaf
        earlier = sample.leaves[: sample.leaves.index(b)]
        forked[id(b)] = max(
            next((k for k in range(len(b.turns)) if b.turns[k].action != e.turns[k].action), len(b.turns))
            for e in earlier
        )
    nodes = tree_nodes(sample.leaves, forked)
    prefixes = [tuple(leaf.token_ids[: leaf.turns[k].start]) for leaf, k in nodes]
    assert len(prefixes) == len(set(prefixes))
    every = {tuple(leaf.token_ids[: leaf.turns[k].start]) for leaf in sample.leaves for k in range(1, len(leaf.turns))}
    assert set(prefixes) == every
    assert sample.generated_tokens < sum(leaf.num_generated_tokens for leaf in sample.leaves)


def test_tree_expands_the_first_turn_and_counts_fresh_chains(tiny_tokenizer: Any) -> None:
    """The paper's candidates are every non-leaf node, the tree's first turn included (a branch that
    keeps only turn 0); a tree whose episodes all end in one turn has none, and its branches are
    fresh chains, counted in root_branches."""
    chat = ChatTemplate(tiny_tokenizer)

    def make_env() -> gym.Env:
        return gym.make("prm/Math-v0", levels=[1], num_tasks=4, max_turns=3)

    cfg = TreeConfig(num_trees=1, expand_nodes=1, expand_rounds=1)
    kept = set()
    for seed in range(8):
        policy = FakePolicy(tiny_tokenizer, lambda prompt, call: f"step {call}")
        sample = sample_trees(make_env, policy, chat, ["math-train-0-00000"], [0], cfg, np.random.default_rng(seed))
        root, branch = sample.leaves
        kept.add(next(k for k in range(len(root.turns)) if branch.turns[k].action != root.turns[k].action))
        assert sample.root_branches == 0
    assert kept == {1, 2}  # turn 0 kept (the first-turn node) and turns 0-1 kept: both drawn
    answer = FakePolicy(tiny_tokenizer, lambda prompt, call: "<answer>7</answer>")
    one = sample_trees(
        make_env,
        answer,
        chat,
        ["math-train-0-00000"],
        [0],
        TreeConfig(num_trees=2, expand_nodes=2),
        np.random.default_rng(0),
    )
    assert len(one.leaves) == 6 and one.root_branches == 4
    assert one.as_batch()[2]["root_branches"] == 4.0


TINY = ["--policy", "hf:tiny", "--demos", "2000", "--sft-steps", "1200", "--tool-fraction", "0.9", "--steps", "30"]
TINY += ["--sft-lr", "3e-3", "--sft-batch", "16", "--lr", "3e-4", "--micro-batch", "16", "--max-new-tokens", "96"]
TINY += ["--eval-tasks", "64", "--eval-samples", "4", "--eval-temperature", "1.0"]
TINY += ["--eval-every", "0", "--threads", "1", "--precision", "fp32"]


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_learn_on_the_tiny_model_raises_held_out_success(tmp_path: Path) -> None:
    """The pipeline of `make learn`, shortened to the small random model (about 15-20 min on 2 cores)."""
    from experiments.demo import main

    result = main(["--output-dir", str(tmp_path), *TINY])
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["grpo"] == pytest.approx(result["grpo"]) and saved["steps"] == 30
    assert (tmp_path / "grpo" / "reward.png").exists() and (tmp_path / "grpo" / "success.png").exists()
    assert result["base"]["n"] == result["sft"]["n"] == result["grpo"]["n"] == 64
    assert result["sft"]["success"] > result["base"]["success"]
    assert result["grpo"]["success"] > result["sft"]["success"]
    assert set(result["minutes"]) == {"base_eval", "sft", "grpo", "total"}


def test_demonstrations_solve_level_two_word_problems_with_the_calculator() -> None:
    from experiments.demo import calculator_expression
    from prm_gym.envs.math.calculator import evaluate
    from prm_gym.envs.math.tasks import generate_math_tasks

    tasks = generate_math_tasks(60, seed=5, split="train", levels=(1, 2))
    for task in tasks:
        expr = calculator_expression(task.prompt)
        assert expr is not None, task.prompt
        assert evaluate(expr) == task.answer, (task.prompt, expr)
    assert calculator_expression("Solve for x: 3x + 1 = 7. What is x") is None
