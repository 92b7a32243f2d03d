"""prm/Math-v0's word problems (levels 5-6): many phrasings, held-out templates never trained on."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import TaskError
from prm_gym.envs.math.calculator import evaluate
from prm_gym.envs.math.tasks import generate_math_tasks
from prm_gym.envs.math.words import HELD_OUT, LEGACY, TEMPLATES, word_problem


def test_every_template_fills_and_its_calls_reach_the_answer() -> None:
    rng = np.random.default_rng(0)
    assert len(TEMPLATES) >= 40 and len(HELD_OUT) >= 10
    for t in TEMPLATES:
        for _ in range(20):
            pool = "held_out" if t.id in HELD_OUT else "train"
            question, answer, meta = word_problem(rng, 5 if len(t.calls) == 1 else 6, pool)
            results: dict[str, str] = {}
            for i, call in enumerate(meta["calls"]):
                results[f"r{i}"] = evaluate(call.format(**results))
            assert results[f"r{len(meta['calls']) - 1}"] == answer
            assert int(answer) > 0 and "{" not in question


def test_held_out_templates_never_appear_in_training_and_levels_match_call_counts() -> None:
    train = generate_math_tasks(400, seed=1, split="train", levels=(5, 6), templates="train")
    held = generate_math_tasks(400, seed=1, split="test", levels=(5, 6), templates="held_out")
    assert not {t.meta["template"] for t in train} & HELD_OUT
    assert {t.meta["template"] for t in held} == HELD_OUT
    for t in [*train, *held]:
        assert (len(t.meta["calls"]) == 1) == (t.meta["level"] == 5)
    assert len({t.meta["template"] for t in train}) == len(LEGACY) - len(HELD_OUT) == 30
    # the phrasing is new, not only the numbers: no held-out question matches a training template
    skeleton = {re.sub(r"\d+", "N", t.prompt) for t in train}
    assert not {re.sub(r"\d+", "N", t.prompt) for t in held} & skeleton


def test_the_env_takes_templates_and_refuses_unknown_ones() -> None:
    env = gym.make("prm/Math-v0", levels=[6], templates="held_out", num_tasks=5, split="test")
    obs, info = env.reset(seed=0)
    assert info["task_id"] and obs.strip()
    with pytest.raises(TaskError, match="templates"):
        generate_math_tasks(3, levels=(5,), templates="unseen")
    with pytest.raises(TaskError, match="levels"):
        generate_math_tasks(3, levels=(7,))
