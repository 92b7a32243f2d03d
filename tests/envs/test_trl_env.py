"""prm/* envs as TRL environments: tools as methods with the env's schemas, turn terms as reward
functions that sum to the env's own episode return, and real GRPOTrainer runs (tiny model fast,
SmolLM2-135M slow)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.parsing import format_answer, format_tool_call
from prm_gym.envs.trl_env import TRLEnv, tool_chat_tokenizer


def _tool_message(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}],
    }


def test_tools_become_methods_with_the_env_schemas() -> None:
    from transformers.utils import get_json_schema

    env = TRLEnv("prm/SQL-v0")
    instance = env()
    public = sorted(n for n in dir(type(instance)) if not n.startswith("_"))
    assert public == ["describe_table", "list_tables", "reset", "run_query"]
    schema = get_json_schema(instance.run_query)["function"]
    gym_env = gym.make("prm/SQL-v0")
    (want,) = [s["function"] for s in gym_env.unwrapped.tool_schemas if s["function"]["name"] == "run_query"]  # type: ignore[attr-defined]
    gym_env.close()
    assert schema["description"] == want["description"]
    assert schema["parameters"]["required"] == ["sql"]
    assert schema["parameters"]["properties"]["sql"]["type"] == "string"


def test_rewards_are_the_env_terms_summed_over_the_episode() -> None:
    env = TRLEnv("prm/Math-v0")
    assert [f.__name__ for f in env.reward_funcs()] == ["prm_outcome", "prm_format", "prm_tool"]
    task_id = env.task_ids[3]
    gold = gym.make("prm/Math-v0")
    obs, _ = gold.reset(seed=5, options={"task_id": task_id})
    answer = str(gold.unwrapped.task.answer)  # type: ignore[attr-defined]
    actions = [format_tool_call("calculator", {"expression": "2 * 21"}), format_answer(answer)]
    want: dict[str, float] = {}
    for action in actions:
        _, _, _, _, info = gold.step(action)
        for term in env.terms:
            want[term] = want.get(term, 0.0) + info[f"reward_{term}"]
    gold.close()

    instance = env()
    assert instance.reset(prompt=[], task_id=task_id, seed=5) == obs
    assert instance.calculator(expression="2 * 21") == "42"  # the raw output: the chat template wraps it
    completion = [_tool_message("calculator", {"expression": "2 * 21"}), {"role": "tool", "content": "42"},
                  {"role": "assistant", "content": format_answer(answer)}]  # fmt: skip
    logged: dict[str, float] = {}
    got = {
        f.__name__: f(prompts=[[]], completions=[completion], environments=[instance], log_metric=logged.__setitem__)
        for f in env.reward_funcs()
    }
    assert got == {f"prm_{t}": [pytest.approx(v)] for t, v in want.items()}
    assert want["outcome"] == 1.0 and logged == {"prm/turns": 2.0, "prm/infra_errors": 0.0}
    assert instance.calculator(expression="1").startswith("The episode is over")


def test_a_completion_ending_in_a_tool_call_is_not_stepped_again() -> None:
    env = TRLEnv("prm/Math-v0")
    instance = env()
    instance.reset(task_id=env.task_ids[0])
    instance.calculator(expression="1+1")
    completion = [_tool_message("calculator", {"expression": "1+1"}), {"role": "tool", "content": "2"}]
    (outcome, *_rest) = env.reward_funcs()
    assert outcome(prompts=[[]], completions=[completion], environments=[instance]) == [0.0]
    assert instance._episode.turns == 1


def _grpo_args(tmp_path: Path, steps: int, length: int) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(tmp_path), max_steps=steps, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=length, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
        max_tool_calling_iterations=2,
    )  # fmt: skip


def _check_logs(trainer: Any, env: TRLEnv) -> None:
    for logs in [row for row in trainer.state.log_history if "reward" in row]:
        means = [logs[f"rewards/prm_{t}/mean"] for t in env.terms]
        assert math.isclose(logs["reward"], sum(means), abs_tol=1e-5)  # TRL's reward is the episode return
        assert logs["prm/turns"] >= 1.0 and logs["prm/infra_errors"] == 0.0


def test_real_grpo_trainer_runs_on_a_prm_env_with_the_tiny_model(tmp_path: Path) -> None:
    from trl import GRPOTrainer

    from prm_gym.core.models import tiny_model, tiny_tokenizer

    env = TRLEnv("prm/Math-v0")
    tok = tool_chat_tokenizer(tiny_tokenizer())
    reward_funcs: list[Any] = list(env.reward_funcs())
    trainer = GRPOTrainer(
        model=tiny_model(len(tok)), reward_funcs=reward_funcs, args=_grpo_args(tmp_path, 1, 16),
        train_dataset=env.dataset(4), processing_class=tok, environment_factory=env,
    )  # fmt: skip
    trainer.train()
    _check_logs(trainer, env)
    assert trainer.state.log_history[0]["rewards/prm_format/mean"] < 0  # random bytes: no answer tag


@pytest.mark.slow
@pytest.mark.timeout(1800)  # loading the GGUF and 2 steps of generation on 2 shared CPU cores
def test_real_two_step_grpo_run_on_smollm2(tmp_path: Path) -> None:
    from trl import GRPOTrainer

    from prm_gym.core.models import load_hf

    model, tok = load_hf("hf:smollm2-135m")
    env = TRLEnv("prm/Math-v0")
    tok = tool_chat_tokenizer(tok)
    reward_funcs: list[Any] = list(env.reward_funcs())
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward_funcs, args=_grpo_args(tmp_path, 2, 48),
        train_dataset=env.dataset(4, system="You are a careful assistant."), processing_class=tok,
        environment_factory=env,
    )  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 2
    _check_logs(trainer, env)
