"""The judges as TRL reward functions: called directly the way GRPOTrainer calls them, and in a real GRPOTrainer."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import ConfigError, JudgeError
from prm_gym.rewards.registry import register_judge
from prm_gym.rewards.testing import FakeJudge
from prm_gym.rewards.trl_adapter import build_turns, completion_turns, trl_reward_func, trl_rewards
from prm_gym.rewards.types import Turn


def _flaky(turn: Turn) -> float:
    if "boom" in turn.action:
        raise JudgeError("judge server down")
    return 0.5


register_judge("trltest/flaky", lambda: FakeJudge("trltest/flaky", _flaky, term="process"), overwrite=True)
register_judge("trltest/down", lambda: FakeJudge("trltest/down", _flaky_all, term="process"), overwrite=True)


def _flaky_all(turn: Turn) -> float:
    raise JudgeError("always down")


def test_plain_text_completions_score_against_the_answer_column() -> None:
    funcs, weights = trl_rewards("rule/exact_match + 0.1*rule/format")
    assert [f.__name__ for f in funcs] == ["rule_exact_match", "rule_format"]
    assert weights == [1.0, 0.1]
    prompts = ["What is 2+2?", "Capital of France?", "Say hi"]
    completions = ["<answer>4</answer>", "<answer>Lyon</answer>", "hello there"]
    cols: dict[str, Any] = {"answer": ["4", "Paris", "hi"], "trainer_state": None}
    assert funcs[0](prompts=prompts, completions=completions, **cols) == [1.0, 0.0, 0.0]
    assert funcs[1](prompts=prompts, completions=completions, **cols) == [0.0, 0.0, -1.0]


def test_a_dataset_without_gold_answers_is_refused_not_scored_zero() -> None:
    """Without the answer column every completion scored a silent 0.0 (a new-user audit, 5 Dec 2026)."""
    (math_equiv, fmt), _ = trl_rewards("rule/math_equiv + 0.1*rule/format")
    prompts, completions = ["x", "y"], ["<answer>4</answer>", "<answer>5</answer>"]
    with pytest.raises(ConfigError, match=r"no 'answer' column \(its columns: \['solution'\]\)"):
        math_equiv(prompts=prompts, completions=completions, solution=["4", "5"], trainer_state=None)
    with pytest.raises(ConfigError, match="1 of 2 completions have none"):
        math_equiv(prompts=prompts, completions=completions, answer=["4", None])
    assert fmt(prompts=prompts, completions=completions) == [0.0, 0.0]  # needs no gold answer
    (named,), _ = trl_rewards("rule/math_equiv", answer_column="solution")
    assert named(prompts=prompts, completions=completions, solution=["4", "6"]) == [1.0, 0.0]


def test_conversational_completions_with_tool_calls_become_history() -> None:
    prompt = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 6*7?"}]
    completion: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'}}
            ],
        },
        {"role": "tool", "name": "calculator", "content": "42"},
        {"role": "assistant", "content": "<answer>42</answer>"},
    ]
    action, history = completion_turns(completion)
    assert action == "<answer>42</answer>"
    assert len(history) == 1 and '"calculator"' in history[0][0] and history[0][1] == "42"
    (turn,) = build_turns([prompt], [completion], {"answer": ["42"], "task_id": ["t-7"]})
    assert turn.task.prompt == "What is 6*7?" and turn.task.id == "t-7" and turn.index == 1 and turn.final
    reward = trl_reward_func("rule/math_equiv + 0.1*rule/format")
    assert reward(prompts=[prompt], completions=[completion], answer=["42"]) == [1.0]


def test_a_failing_judge_gives_none_only_for_the_completions_it_failed_on() -> None:
    (func,), _ = trl_rewards("trltest/flaky")
    logged: dict[str, float] = {}
    out = func(
        prompts=["p"] * 3,
        completions=["fine", "boom", "fine too"],
        answer=["a"] * 3,
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert out == [0.5, None, 0.5]
    assert logged == {"trltest_flaky/infra_errors": 1.0}
    combined = trl_reward_func("rule/exact_match + 2*trltest/flaky")
    assert combined(prompts=["p", "p"], completions=["<answer>a</answer>", "boom"], answer=["a", "a"]) == [2.0, None]


def test_a_bug_in_a_judge_raises_instead_of_becoming_none() -> None:
    def buggy(turn: Turn) -> float:
        return {}["missing"]  # a KeyError, as a bug in judge code would raise

    register_judge("trltest/buggy", lambda: FakeJudge("trltest/buggy", buggy, term="process"), overwrite=True)
    (func,), _ = trl_rewards("trltest/buggy")
    with pytest.raises(KeyError):
        func(prompts=["p"], completions=["fine"], answer=["a"])


def test_real_grpo_trainer_step_uses_the_rewards_and_drops_failed_ones(tmp_path: Path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from prm_gym.core.models import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}] * 4)
    funcs, weights = trl_rewards("0.1*rule/format + trltest/down")
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        reward_weights=weights,
    )
    reward_funcs: list[Any] = list(funcs)  # TRL's parameter is an invariant list of a wider union
    trainer = GRPOTrainer(
        model=tiny_model(len(tok)), reward_funcs=reward_funcs, args=args, train_dataset=data, processing_class=tok
    )
    trainer.train()
    logs = trainer.state.log_history[0]
    assert logs["rewards/rule_format/mean"] == -1.0  # a random tiny model writes no tool call or answer
    down = logs["rewards/trltest_down/mean"]
    assert down is None or math.isnan(down)  # None -> excluded from the statistics, never scored 0
    assert logs["trltest_down/infra_errors"] > 0
    assert math.isclose(logs["reward"], -0.1, abs_tol=1e-6)
