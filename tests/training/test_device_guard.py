"""The device guard (:mod:`prm_gym.core.device_guard`) over every path that makes tensors for a model:
a multi-turn rollout with kept prefixes, a GRPO step, a Tree-GRPO fork, SFT and an evaluation, all on
the CPU. Any tensor factory in the project's code that names no device fails here, as it would mix a
CPU tensor with the model's on a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_trainer import small as trainer_small  # the suite's small Math run (tests/training is on sys.path)

from prm_gym.agents.hf import HFPolicy
from prm_gym.core.device_guard import DeviceGuardError, device_guard
from prm_gym.core.models import tiny_model
from prm_gym.core.policy import SamplingParams
from prm_gym.training.config import EvalConfig, SamplingConfig, TrainConfig, TreeConfig
from prm_gym.training.metrics import read_metrics
from prm_gym.training.sft import sft
from prm_gym.training.trainer import train

ENV_KW = '{"levels": [1], "num_tasks": 20, "max_turns": 3}'


def test_the_guard_names_the_line_of_a_factory_without_a_device() -> None:
    with device_guard(roots=(Path(__file__).resolve().parents[1],)) as guard, pytest.raises(DeviceGuardError) as err:
        torch.arange(3)
    assert "tests/training/test_device_guard.py:" in str(err.value) and "torch.arange" in str(err.value)
    with device_guard(roots=(Path(__file__).resolve().parents[1],)) as guard:
        x = torch.arange(3, device="cpu")
        x.new_zeros(2)  # follows x
        x.tolist()
        bool(x.any())
    assert guard.syncs["tests/training/test_device_guard.py"] == 2
    assert torch.arange(2).tolist() == [0, 1]  # outside the block nothing is checked


def test_multi_turn_sampling_with_kept_prefixes_and_stop_strings_names_every_device(tiny_tokenizer: Any) -> None:
    model = tiny_model(len(tiny_tokenizer), seed=3).eval()
    policy = HFPolicy(model, tiny_tokenizer, seed=0)
    system = tiny_tokenizer.encode("You are a careful calculator. Think, then answer in one line. " * 2)
    prompts = [system + tiny_tokenizer.encode(q) for q in ("2+2?", "2+2?", "7*6?", "10-3?")]
    params = SamplingParams(max_new_tokens=10, temperature=1.0, stop=["</tool_call>", "\n"])
    with device_guard():
        first = policy.generate(prompts, params)
        follow = [p + g.token_ids + tiny_tokenizer.encode(" result: 4. ") for p, g in zip(prompts, first, strict=True)]
        second = policy.generate(follow, params)  # extends the kept caches of the first turn
        greedy = policy.generate(follow, SamplingParams(max_new_tokens=6, temperature=0.0))
    assert all(g.token_ids for g in first + second + greedy)


def small(out: Path, **kw: object) -> TrainConfig:
    """test_trainer's small run: one step of three-turn episodes on the CPU, two held-out tasks."""
    flags: dict[str, object] = dict(env_kwargs=ENV_KW, steps=1, checkpoint_every=0, device="cpu")
    flags.update(sampling=SamplingConfig(max_new_tokens=8), eval=EvalConfig(num_tasks=2, samples=1))
    return trainer_small(out, **{**flags, **kw})


def test_a_grpo_step_and_its_evaluations_name_every_device(tmp_path: Path) -> None:
    with device_guard():
        train(small(tmp_path))
    assert [r["step"] for r in read_metrics(tmp_path) if "loss" in r] == [1]


def test_a_tree_grpo_step_with_forks_names_every_device(tmp_path: Path) -> None:
    tree = TreeConfig(num_trees=2, expand_nodes=1, expand_rounds=1)
    with device_guard():
        train(small(tmp_path, algo="tree-grpo", group_size=4, tree=tree, precision="bf16"))
    row = next(r for r in read_metrics(tmp_path) if "reward" in r)
    assert row["generated_tokens"] > 0


def test_an_sft_step_names_every_device(tiny_tokenizer: Any) -> None:
    model = tiny_model(len(tiny_tokenizer), seed=3)
    ids = tiny_tokenizer.encode("2+2? <answer>4</answer>")
    demos = [(ids, [0] * 4 + [1] * (len(ids) - 4)), (ids[:6], [0, 0, 1, 1, 1, 1])]
    with device_guard():
        loss = sft(model, demos, steps=2, lr=1e-3, batch=2, seed=0, bf16=False)
    assert loss == loss and loss > 0
