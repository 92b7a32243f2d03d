"""The prompt teaches the tool-call format the env parses: detection from a tokenizer's chat
template, our tool block per format, and the template's own ``tools=`` rendering.

The templates below are written for these tests in the style of each family's published
template (markers, where the tools go, the call syntax they teach); nothing is downloaded.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate, detect_tool_format, renders_tools, tool_role
from prm_gym.agents.rollout import rollout
from prm_gym.core.errors import ConfigError
from prm_gym.core.models import CHATML_TEMPLATE, tiny_tokenizer
from prm_gym.core.parsing import format_tool_call, parse_action
from prm_gym.core.policy import FakePolicy, SamplingParams
from prm_gym.core.tool_formats import FORMAT_NAMES, FORMATS
from prm_gym.envs.math.env import MathEnv
from prm_gym.training.config import TrainConfig
from prm_gym.training.sources import worker_spec
from prm_gym.training.worker import RolloutWorker

NL = "{{ '\\n' }}"

LLAMA3 = (
    "{{ bos_token or '' }}"
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set messages = messages[1:] %}"
    "{% else %}{% set sys = '' %}{% endif %}"
    "<|start_header_id|>system<|end_header_id|>" + NL + NL + "{% if tools %}Environment: ipython" + NL + "{% endif %}"
    "{{ sys }}<|eot_id|>"
    "{% if tools %}{% set first = messages[0]['content'] %}{% set messages = messages[1:] %}"
    "<|start_header_id|>user<|end_header_id|>" + NL + NL + "Answer with a JSON function call when one helps. "
    'Use the format {"name": function name, "parameters": dictionary of argument name and its value}.' + NL + NL +
    "{% for t in tools %}{{ t | tojson(indent=4) }}" + NL + NL + "{% endfor %}{{ first }}<|eot_id|>{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' and m.tool_calls is defined %}<|start_header_id|>assistant<|end_header_id|>"
    + NL + NL + "<|python_tag|>{% for c in m.tool_calls %}"
    '{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}{% endfor %}<|eom_id|>'
    "{% elif m['role'] in ('tool', 'ipython') %}<|start_header_id|>ipython<|end_header_id|>" + NL + NL +
    "{{ m['content'] }}<|eot_id|>"
    "{% else %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>" + NL + NL + "{{ m['content'] }}<|eot_id|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>" + NL + NL + "{% endif %}"
)  # fmt: skip

MISTRAL = (
    "{{ bos_token or '' }}"
    "{% if messages[0]['role'] == 'system' %}[SYSTEM_PROMPT]{{ messages[0]['content'] }}[/SYSTEM_PROMPT]"
    "{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}"
    "{% set ns = namespace(last_user=-1) %}"
    "{% for m in loop_messages %}{% if m['role'] == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}"
    "{% endfor %}"
    "{% for m in loop_messages %}"
    "{% if m['role'] == 'user' %}"
    "{% if tools and loop.index0 == ns.last_user %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "[INST]{{ m['content'] }}[/INST]"
    "{% elif m['role'] == 'assistant' and m.tool_calls is defined %}[TOOL_CALLS]["
    "{% for c in m.tool_calls %}"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
    "{% if not loop.last %}, {% endif %}{% endfor %}]</s>"
    "{% elif m['role'] == 'tool' %}[TOOL_RESULTS]{{ m['content'] }}[/TOOL_RESULTS]"
    "{% else %}{{ m['content'] }}</s>{% endif %}"
    "{% endfor %}"
)  # fmt: skip

_CHATML_TURNS = (
    "{% for m in messages %}{% if not (loop.first and m['role'] == 'system') %}"
    "<|im_start|>{{ m['role'] }}" + NL + "{{ m['content'] }}<|im_end|>" + NL + "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant" + NL + "{% endif %}"
)

QWEN25 = (
    "{% if tools %}<|im_start|>system" + NL +
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}" + NL + NL +
    "# Tools" + NL + NL + "You may call one or more functions. Their signatures are inside <tools></tools>:" + NL +
    "<tools>{% for t in tools %}" + NL + "{{ t | tojson }}{% endfor %}" + NL + "</tools>" + NL + NL +
    "For each call, return a JSON object with the function name and arguments inside <tool_call></tool_call>:" + NL +
    '<tool_call>' + NL + '{"name": <function-name>, "arguments": <args-json-object>}' + NL + "</tool_call><|im_end|>"
    + NL + "{% elif messages[0]['role'] == 'system' %}<|im_start|>system" + NL +
    "{{ messages[0]['content'] }}<|im_end|>" + NL + "{% endif %}" + _CHATML_TURNS
)  # fmt: skip

QWEN3_CODER = (
    "{% if tools %}<|im_start|>system" + NL +
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}" + NL + NL +
    "# Tools" + NL + NL + "You have these functions:" + NL + "<tools>{% for t in tools %}" + NL +
    "<function>" + NL + "<name>{{ t.function.name }}</name>" + NL +
    "<description>{{ t.function.description }}</description>" + NL + "</function>{% endfor %}" + NL + "</tools>"
    + NL + NL + "To call a function reply exactly like this:" + NL + "<tool_call>" + NL +
    "<function=example_function_name>" + NL + "<parameter=example_parameter>" + NL + "value" + NL + "</parameter>"
    + NL + "</function>" + NL + "</tool_call><|im_end|>" + NL +
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system" + NL +
    "{{ messages[0]['content'] }}<|im_end|>" + NL + "{% endif %}" + _CHATML_TURNS
)  # fmt: skip

TEMPLATES = {"llama3": LLAMA3, "mistral": MISTRAL, "hermes": QWEN25, "qwen": QWEN3_CODER}


def tokenizer_with(template: str, name: str = "") -> Any:
    tok = tiny_tokenizer()
    tok.chat_template = template
    tok.name_or_path = name
    return tok


@pytest.fixture()
def math_env() -> Any:
    env = MathEnv(num_tasks=2, levels=(1,))
    yield env
    env.close()


@pytest.mark.parametrize("fmt", TEMPLATES)
def test_the_format_is_detected_from_the_chat_template(fmt: str) -> None:
    tok = tokenizer_with(TEMPLATES[fmt])
    assert detect_tool_format(tok) == fmt
    assert renders_tools(tok)
    assert ChatTemplate(tok, tool_format="auto").tool_format == fmt


def test_detection_falls_back_to_hermes_and_reads_names_and_template_dicts() -> None:
    plain = tokenizer_with(CHATML_TEMPLATE)
    assert detect_tool_format(plain) == "hermes" and not renders_tools(plain)
    assert detect_tool_format(tokenizer_with(QWEN25, "Qwen/Qwen2.5-Coder-7B-Instruct")) == "qwen"
    named = SimpleNamespace(chat_template={"default": CHATML_TEMPLATE, "tool_use": MISTRAL})
    assert detect_tool_format(named) == "mistral"
    assert detect_tool_format(SimpleNamespace(chat_template=None)) == "hermes"


def test_a_template_that_renders_tools_writes_them_itself_under_auto(math_env: Any) -> None:
    obs, info = math_env.reset(seed=0)
    for fmt, template in TEMPLATES.items():
        tok = tokenizer_with(template)
        chat = ChatTemplate(tok, tools_block="auto", tool_format="auto")
        assert chat.tools_block == "native", fmt
        text = tok.decode(chat.prompt_ids(obs, info["tools"]))
        assert "calculator" in text and obs in text and "# Tools\n\nYou may call one or more of these" not in text
        assert chat.system_message(info["tools"]) == chat.system_prompt
    full = ChatTemplate(tokenizer_with(LLAMA3), tools_block="full", tool_format="auto")
    assert "<tools>" in full.system_message(info["tools"])


def test_native_falls_back_or_refuses_where_the_template_cannot_teach_the_format(math_env: Any) -> None:
    plain = tokenizer_with(CHATML_TEMPLATE)
    assert ChatTemplate(plain, tools_block="auto", tool_format="auto").tools_block == "full"
    with pytest.raises(ConfigError, match="tools_block='native'"):
        ChatTemplate(plain, tools_block="native")
    # the template teaches llama3 JSON; a policy told to write mistral calls gets our block instead
    mismatch = ChatTemplate(tokenizer_with(LLAMA3), tools_block="auto", tool_format="mistral")
    assert mismatch.tools_block == "full" and "[TOOL_CALLS]" in mismatch.system_message(math_env.tool_schemas)
    with pytest.raises(ConfigError, match="tools_block must be one of"):
        ChatTemplate(plain, tools_block="schemas")


def _filled(example: str, fmt: str) -> str:
    """The call example a prompt shows, with its placeholders filled in."""
    value = '\\"2+3\\"' if fmt == "openai" else '"2+3"'
    argument = '\\"<argument>\\"' if fmt == "openai" else '"<argument>"'
    return (
        example.replace(argument, argument.replace("<argument>", "expression"))
        .replace("<value>", value)
        .replace('"<tool name>"', '"calculator"')
    )


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_the_call_example_our_block_shows_is_what_the_parser_accepts(fmt: str, math_env: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer(), tools_block="full", tool_format=fmt)
    system = chat.system_message(math_env.tool_schemas)
    how = FORMATS[fmt].how_to_call
    assert how in system
    example = how.split(":\n", 1)[1]
    parsed = parse_action(_filled(example, fmt), tool_format=fmt)
    assert parsed.ok and [(c.name, c.arguments) for c in parsed.tool_calls] == [("calculator", {"expression": "2+3"})]
    compact = ChatTemplate(tiny_tokenizer(), tools_block="compact", tool_format=fmt)
    assert FORMATS[fmt].syntax in compact.system_message(math_env.tool_schemas)


def test_env_kwargs_carry_the_resolved_format_and_refuse_a_contradiction() -> None:
    chat = ChatTemplate(tokenizer_with(LLAMA3), tool_format="auto")
    assert chat.env_kwargs({"levels": [1]}) == {"levels": [1], "tool_format": "llama3"}
    assert ChatTemplate(tiny_tokenizer()).env_kwargs({"levels": [1]}) == {"levels": [1]}  # hermes: left out
    with pytest.raises(ConfigError, match="--tool-format mistral"):
        chat.env_kwargs({"tool_format": "mistral"})


@pytest.mark.parametrize("fmt", ["llama3", "mistral", "qwen"])
def test_a_worker_plays_an_episode_in_the_format_its_tokenizer_teaches(fmt: str) -> None:
    """train-agent's path: --tool-format auto reaches the worker, whose envs parse that format."""
    cfg = TrainConfig(env="prm/Math-v0", env_kwargs=json.dumps({"levels": [1], "num_tasks": 2}))
    assert cfg.tool_format == "auto" and cfg.tools_prompt == "auto"
    tok = tokenizer_with(TEMPLATES[fmt])
    probe = gym.make("prm/Math-v0", levels=[1], num_tasks=2)
    probe.reset(seed=3)
    answer = str(probe.unwrapped.task.answer)  # type: ignore[attr-defined]
    probe.close()
    script = [format_tool_call("calculator", {"expression": "6*7"}, fmt), f"<answer>{answer}</answer>"]
    worker = RolloutWorker(worker_spec(cfg), 0, policy=FakePolicy(tok, script))
    assert worker.chat.tool_format == fmt and worker.chat.tools_block == "native"
    env = worker.make_env()
    assert env.unwrapped.tool_format == fmt  # type: ignore[attr-defined]
    (traj,) = rollout([env], worker.policy, worker.chat, seeds=[3], sampling=SamplingParams(max_new_tokens=400))
    infos = [t.info for t in traj.turns]
    assert [i["tool"]["calls"] for i in infos] == [1, 0] and all(i["parse"]["ok"] for i in infos)
    assert infos[-1]["reward_outcome"] == 1.0
    env.close()
    worker.close()


REFUSES_TOOL = (
    "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tool role') }}{% endif %}"
    "{% endfor %}" + QWEN25
)
# Qwen2.5's way with tool results: a user turn of <tool_response> blocks
QWEN25_TOOL_RESULTS = QWEN25.replace(
    "<|im_start|>{{ m['role'] }}" + NL + "{{ m['content'] }}<|im_end|>",
    "{% if m['role'] == 'tool' %}<|im_start|>user"
    + NL
    + "<tool_response>"
    + NL
    + "{{ m['content'] }}"
    + NL
    + "</tool_response><|im_end|>{% else %}<|im_start|>{{ m['role'] }}"
    + NL
    + "{{ m['content'] }}<|im_end|>{% endif %}",
)


@pytest.mark.parametrize(
    ("template", "shown"),
    [
        (LLAMA3, "<|start_header_id|>ipython<|end_header_id|>\n\nOBS<|eot_id|>"),
        (MISTRAL, "</s>[TOOL_RESULTS]OBS[/TOOL_RESULTS]"),
        (QWEN25_TOOL_RESULTS, "<|im_start|>user\n<tool_response>\nOBS\n</tool_response><|im_end|>"),
    ],
)
def test_with_native_tools_results_go_back_in_the_templates_tool_role(template: str, shown: str) -> None:
    """Where the template writes the tools itself, it also gets the tool results in its own tool role
    (``tool``; Llama 3.1 renders it as ``ipython``), not as a plain user message."""
    tok = tokenizer_with(template)
    chat = ChatTemplate(tok, tools_block="auto", tool_format="auto")
    assert chat.tools_block == "native" and chat.observation_role == "tool"
    assert shown in tok.decode(chat.observation_ids("OBS", []))
    as_user = ChatTemplate(tok, tools_block="auto", tool_format="auto", observation_role="user")
    assert shown not in tok.decode(as_user.observation_ids("OBS", []))


def test_the_observation_role_stays_user_without_native_tools_or_a_tool_role() -> None:
    assert tool_role(tokenizer_with(LLAMA3)) == "tool"
    assert ChatTemplate(tokenizer_with(LLAMA3), tools_block="full", tool_format="auto").observation_role == "user"
    assert ChatTemplate(tiny_tokenizer()).observation_role == "user"  # our own tool block: user turns
    assert ChatTemplate(tokenizer_with(QWEN3_CODER), tools_block="auto", tool_format="auto").observation_role == "user"
    refusing = tokenizer_with(REFUSES_TOOL)
    assert tool_role(refusing) is None
    assert ChatTemplate(refusing, tools_block="native", tool_format="auto").observation_role == "user"
    given = ChatTemplate(tokenizer_with(LLAMA3), tools_block="auto", tool_format="auto", observation_role="user")
    assert given.observation_role == "user"
