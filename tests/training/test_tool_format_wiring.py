"""train-agent's --tool-format reaches every env it makes: the run's, and evaluation's."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.models import tiny_model, tiny_tokenizer
from prm_gym.core.parsing import format_tool_call
from prm_gym.core.policy import FakePolicy
from prm_gym.training.config import EvalConfig, SamplingConfig, TrainConfig
from prm_gym.training.evaluation import evaluate
from prm_gym.training.run import build_run

# A Llama-3-style template (written for this test): JSON calls with "parameters", an ipython role.
LLAMA = (
    "{% for m in messages %}<|start_header_id|>{{ 'ipython' if m['role'] == 'tool' else m['role'] }}"
    "<|end_header_id|>{{ '\\n\\n' }}{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>{{ '\\n\\n' }}{% endif %}"
    '{# a call renders as {"name": ..., "parameters": ...} #}'
)
MATH = json.dumps({"levels": [1], "num_tasks": 3})


def _llama_tokenizer() -> object:
    tok = tiny_tokenizer()
    tok.chat_template = LLAMA
    return tok


def _solver(prompt: str, call: int) -> str:
    """Calls the calculator in Llama's JSON form, then answers with what it returned."""
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt)
    if results:
        return f"<answer>{results[-1]}</answer>"
    question = re.findall(r"What is (.*?)\?", prompt)[-1]
    return format_tool_call("calculator", {"expression": question}, "llama3")


def test_evaluation_envs_parse_the_format_the_prompt_teaches() -> None:
    tok = _llama_tokenizer()
    chat = ChatTemplate(tok, tool_format="auto", tools_block="auto")
    assert chat.tool_format == "llama3"
    cfg = TrainConfig(
        env="prm/Math-v0",
        env_kwargs=MATH,
        sampling=SamplingConfig(max_new_tokens=200),
        eval=EvalConfig(env_kwargs=json.dumps({"split": "test"}), num_tasks=3, samples=1, temperature=0),
    )
    result = evaluate(FakePolicy(tok, _solver), chat, cfg)
    assert result["tasks_scored"] == 3 and result["pass@1"] == 1.0  # a hermes env would see no call at all


def test_a_training_run_makes_its_envs_in_the_policys_format(tmp_path: Path) -> None:
    tok = _llama_tokenizer()
    tiny_model(len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)  # type: ignore[attr-defined]
    run = build_run(TrainConfig(env="prm/Math-v0", env_kwargs=MATH, policy=f"hf:{tmp_path}", output_dir=str(tmp_path)))
    assert run.chat.tool_format == "llama3" and run.chat.tools_block == "full"  # this template cannot render tools=
    env = run.make_envs["prm/Math-v0"]()
    assert env.unwrapped.tool_format == "llama3"  # type: ignore[attr-defined]
    env.close()
    hermes = build_run(
        TrainConfig(env="prm/Math-v0", env_kwargs=MATH, policy=f"hf:{tmp_path}", tool_format="hermes")
    ).make_envs["prm/Math-v0"]()
    assert hermes.unwrapped.tool_format == "hermes"  # type: ignore[attr-defined]
    hermes.close()
