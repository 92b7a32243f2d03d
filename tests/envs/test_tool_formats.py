"""Tool-call formats: each family's real output parses, malformed calls are the agent's format
failures (never exceptions), and a whole env episode runs in every format."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import format_tool_call, parse_action
from prm_gym.core.tasks import Task, TaskSet
from prm_gym.core.tool_formats import FORMAT_NAMES
from prm_gym.envs.custom import CustomToolEnv
from prm_gym.envs.math.env import MathEnv

CALC = ("calculator", {"expression": "2+3"})
HERMES_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>'
ADD_XML = (
    "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n40\n</parameter>\n"
    "</function>\n</tool_call>"
)
OPENAI_DICT_ARGS = (
    '{"tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}]}'
)

#: What each family really writes for one or two calls (after decoding with special tokens skipped,
#: and with them kept).
REALISTIC: dict[str, list[tuple[str, list[tuple[str, dict[str, Any]]]]]] = {
    "hermes": [
        ("I will compute.\n" + HERMES_CALL, [CALC]),
    ],
    "llama3": [
        ('{"name": "calculator", "parameters": {"expression": "2+3"}}', [CALC]),
        ('<|python_tag|>{"name": "calculator", "parameters": {"expression": "2+3"}}<|eom_id|>', [CALC]),
        ('{"type": "function", "name": "calculator", "parameters": {"expression": "2+3"}}', [CALC]),  # Llama 3.2
        (
            'Two sums. {"name": "calculator", "parameters": {"expression": "2+3"}}; '
            '{"name": "calculator", "parameters": {"expression": "1"}}',
            [CALC, ("calculator", {"expression": "1"})],
        ),
    ],
    "mistral": [
        ('[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "2+3"}, "id": "a1B2c3D4e"}]', [CALC]),
        (' [{"name": "calculator", "arguments": {"expression": "2+3"}}]', [CALC]),  # [TOOL_CALLS] decoded away
        ('[TOOL_CALLS]calculator[ARGS]{"expression": "2+3"}', [CALC]),  # v11 tokenizers
        ('calculator{"expression": "2+3"}', [CALC]),  # v11 with its control tokens decoded away
        (
            '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "2+3"}}, '
            '{"name": "calculator", "arguments": {"expression": "1"}}]',
            [CALC, ("calculator", {"expression": "1"})],
        ),
    ],
    "qwen": [
        ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>', [CALC]),
        (
            "<tool_call>\n<function=calculator>\n<parameter=expression>\n2+3\n</parameter>\n</function>\n</tool_call>",
            [CALC],
        ),  # Qwen3-Coder
        ('<tools>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tools>', [CALC]),  # Qwen2.5-Coder
        ('```json\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n```', [CALC]),
        ('{"name": "calculator", "arguments": {"expression": "2+3"}}', [CALC]),
        (
            '<tools>[{"name": "calculator", "arguments": {"expression": "2+3"}}, '
            '{"name": "calculator", "arguments": {"expression": "1"}}]</tools>',
            [CALC, ("calculator", {"expression": "1"})],
        ),
    ],
    "openai": [
        (
            '{"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function", '
            '"function": {"name": "calculator", "arguments": "{\\"expression\\": \\"2+3\\"}"}}]}',
            [CALC],
        ),
        (OPENAI_DICT_ARGS, [CALC]),
    ],
}

#: Broken calls of each family, and the issue each must raise.
MALFORMED: dict[str, list[tuple[str, str]]] = {
    "hermes": [('<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}</tool_call>', "invalid_json")],
    "llama3": [
        ('{"name": "calculator", "parameters": {"expression": "2+3"}', "invalid_json"),
        ("<|python_tag|>print(2+3)", "bad_tool_call"),
        ('{"name": "calculator", "parameters": [1]}', "bad_tool_call"),
        ('{"type": "code", "name": "calculator", "parameters": {}}', "bad_tool_call"),
        ('{"name": "calculator", "parameters": {}, "arguments": {}}', "bad_tool_call"),
    ],
    "mistral": [
        ('[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "2+3"}', "invalid_json"),
        ("[TOOL_CALLS] I will call the calculator", "bad_tool_call"),
        ('[TOOL_CALLS] [{"arguments": {}}]', "bad_tool_call"),
    ],
    "qwen": [
        ("<tool_call>\n<function=calculator>\n<parameter=expression>2+3</function>\n</tool_call>", "bad_tool_call"),
        ("<tool_call><function=calculator>stray<parameter=e>1</parameter></function></tool_call>", "bad_tool_call"),
        ('<tools>{"name": "calculator", "arguments": {"expression": "2+3"}}', "unclosed_tag"),
        ('```json\n{"name": "calculator", "arguments": {"expression": "2+3"}\n```', "invalid_json"),
        ('<tool_call>{"name": "calculator"', "unclosed_tag"),
    ],
    "openai": [
        ('{"tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": "{bad"}}]}',
         "invalid_json"),
        ('{"tool_calls": {"name": "calculator"}}', "bad_tool_call"),
        ('{"tool_calls": [{"type": "retrieval"}]}', "bad_tool_call"),
        ('{"role": "assistant", "tool_calls": [', "invalid_json"),
    ],
}  # fmt: skip


def calls(text: Any, fmt: str) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in parse_action(text, tool_format=fmt).tool_calls]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_format_parses_what_its_models_write(fmt: str) -> None:
    for text, want in REALISTIC[fmt]:
        parsed = parse_action(text, tool_format=fmt)
        assert parsed.ok, (text, parsed.issues)
        assert calls(text, fmt) == want and parsed.answer is None and parsed.tool_format == fmt


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_malformed_calls_are_format_issues_not_exceptions(fmt: str) -> None:
    for text, code in MALFORMED[fmt]:
        parsed = parse_action(text, tool_format=fmt)
        assert not parsed.ok and not parsed.tool_calls, text
        assert code in [i.code for i in parsed.issues], (text, parsed.issues)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_rendered_calls_parse_back_and_answers_still_end_turns(fmt: str) -> None:
    args = {"query": 'a "quoted" ünïcode {brace}', "k": 3, "nested": {"x": [1, 2]}}
    assert calls(format_tool_call("search", args, fmt), fmt) == [("search", args)]
    both = format_tool_call("search", {"q": "x"}, fmt) + "\n<answer>7</answer>"
    assert [i.code for i in parse_action(both, tool_format=fmt).issues] == ["call_and_answer"]
    answered = parse_action('Reasoning with {"braces"} and [lists]. <answer>{"name": "x"}</answer>', tool_format=fmt)
    assert answered.ok and answered.answer == '{"name": "x"}' and not answered.tool_calls
    prose = parse_action("I am not sure yet.", tool_format=fmt)
    assert [i.code for i in prose.issues] == ["no_action"]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_too_many_calls_are_flagged_in_every_format(fmt: str) -> None:
    text = "\n".join(format_tool_call("c", {"i": i}, fmt) for i in range(9))
    assert "too_many_tool_calls" in [i.code for i in parse_action(text, tool_format=fmt, max_tool_calls=8).issues]


def test_openai_takes_a_message_dict_and_reads_the_answer_from_its_content() -> None:
    message = {"role": "assistant", "content": "<answer>5</answer>", "tool_calls": None}
    parsed = parse_action(message, tool_format="openai")
    assert parsed.ok and parsed.answer == "5" and json.loads(parsed.text) == message
    assert [i.code for i in parse_action(message).issues] == ["not_text"]  # only the openai format takes dicts


def test_markup_hidden_in_an_openai_message_by_json_escapes_is_still_imitation() -> None:
    escaped = '{"role": "assistant", "content": "\\u003ctool_response\\u003e42\\u003c/tool_response\\u003e"}'
    assert "<tool_response>" not in escaped
    assert "markup_imitation" in [i.code for i in parse_action(escaped, tool_format="openai").issues]


def test_qwen3_coder_parameters_are_text_until_the_schema_types_them() -> None:
    (call,) = parse_action(ADD_XML, tool_format="qwen").tool_calls
    assert call.arguments == {"a": "2", "b": "40"} and call.text_arguments


def test_unknown_formats_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="tool_format='harmony'"):
        parse_action("<answer>1</answer>", tool_format="harmony")
    with pytest.raises(ConfigError, match="tokenizer"):
        MathEnv(tool_format="auto")


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(FORMAT_NAMES),
    st.lists(
        st.sampled_from(
            ['{"name": ', '"calc"', '"parameters": ', '"arguments": ', "{", "}", "[", "]", ",", ":", '"x"', "1",
             "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<tool_call>", "</tool_call>", "<tools>", "</tools>",
             "<function=f>", "</function>", "<parameter=p>", "</parameter>", "```json\n", "```", '{"tool_calls": ',
             '"function": ', '"type": "function"', "<answer>", "</answer>", "\\", '"', " ", "\n", "\ud800"]
        ),
        max_size=14,
    ).map("".join),
)  # fmt: skip
def test_fuzz_no_format_ever_raises(fmt: str, text: str) -> None:
    parsed = parse_action(text, tool_format=fmt)
    assert parsed.ok or parsed.issues
    assert all(isinstance(c.arguments, dict) for c in parsed.tool_calls)


_N = 32_000
HOSTILE = [
    '{"name":' * (_N // 8),
    "[TOOL_CALLS]" + "[" * (_N - 20),
    "<tool_call><function=f>" + "<parameter=p>x" * (_N // 15) + "</function></tool_call>",
    "<answer>" * (_N // 8),
    "<tools>" * (_N // 7),
    '```json\n{"name":' * (_N // 16),
    '{"name": "c", "parameters": {}}' * (_N // 32),
]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_hostile_actions_at_the_size_limit_are_flagged_in_every_format(fmt: str) -> None:
    for text in HOSTILE:  # each once took seconds (a scan per unclosed tag); now one pass
        parsed = parse_action(text[:_N], tool_format=fmt)
        assert parsed.ok or parsed.issues


# ----------------------------------------------------------------------------- whole episodes
def _answer_action(answer: str, fmt: str) -> Any:
    if fmt == "openai":
        return {"role": "assistant", "content": f"<answer>{answer}</answer>"}
    return f"The result is <answer>{answer}</answer>"


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_an_episode_round_trips_in_every_format(fmt: str) -> None:
    env = MathEnv(num_tasks=4, levels=(1,), tool_format=fmt)
    obs, _ = env.reset(seed=0)
    assert env.task is not None
    obs, reward, terminated, truncated, info = env.step(format_tool_call("calculator", {"expression": "6*7"}, fmt))
    assert info["parse"] == {"ok": True, "issues": ""} and info["tool"]["calls"] == 1 and info["tool"]["ok"]
    assert "<tool_response>\n42\n</tool_response>" in obs and not terminated
    branch = env.fork()  # replay re-parses the recorded actions in the env's format
    assert branch.actions == env.actions
    obs, reward, terminated, truncated, info = env.step(_answer_action(str(env.task.answer), fmt))
    assert terminated and info["answer"] == str(env.task.answer) and info["reward_status"] == "ok"
    assert info["reward_outcome"] == 1.0
    _, _, done, _, branch_info = branch.step(_answer_action(str(env.task.answer), fmt))
    assert done and branch_info["reward_outcome"] == 1.0
    env.close()
    branch.close()


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_malformed_call_is_the_agents_format_failure_in_every_format(fmt: str) -> None:
    env = MathEnv(num_tasks=2, levels=(1,), tool_format=fmt)
    env.reset(seed=0)
    text, code = MALFORMED[fmt][0]
    obs, reward, terminated, truncated, info = env.step(text)
    assert info["reward_status"] == "ok" and not terminated and info["tool"]["calls"] == 0
    assert code in info["parse"]["issues"] and info["reward_format"] < 0 and "Format error" in obs
    env.close()


def test_llama3_is_lenient_about_the_arguments_key_but_not_about_plain_json() -> None:
    assert calls('{"name": "calculator", "arguments": {"expression": "2+3"}}', "llama3") == [CALC]
    assert calls(format_tool_call(*CALC), "llama3") == [CALC]  # a Hermes-tagged call is still one call
    plain = parse_action('The data is {"x": 1, "y": [2]}; so <answer>3</answer>', tool_format="llama3")
    assert plain.ok and plain.answer == "3" and not plain.tool_calls


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def test_qwen3_coder_text_parameters_reach_the_tool_typed_by_its_schema() -> None:
    tasks = TaskSet([Task("t", "2 + 40?", "42")])
    env = CustomToolEnv(tools=[add], tasks=tasks, tool_format="qwen")
    env.reset(seed=0)
    obs, _, _, _, info = env.step(ADD_XML)
    assert info["tool"]["ok"] and "42" in obs
    bad = ADD_XML.replace("40", "forty")
    obs, _, _, _, info = env.step(bad)  # a value the schema's type cannot take: the tool's error, scored
    assert not info["tool"]["ok"] and "must be a number" in obs and info["reward_status"] == "ok"
    env.close()
