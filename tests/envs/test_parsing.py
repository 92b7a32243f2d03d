"""The one tool-call parser: unit cases and a fuzz test that it never raises."""

from __future__ import annotations

import json

import gymnasium as gym
from hypothesis import given, settings
from hypothesis import strategies as st

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.parsing import MAX_ACTION_CHARS, _fast_answer, format_tool_call, parse_action, parse_general


def codes(text: object) -> list[str]:
    return [i.code for i in parse_action(text).issues]


def test_hermes_tool_call() -> None:
    p = parse_action('I will compute.\n<tool_call>\n{"name": "calc", "arguments": {"x": 1}}\n</tool_call>')
    assert p.ok and p.answer is None
    assert [(c.name, c.arguments) for c in p.tool_calls] == [("calc", {"x": 1})]


def test_several_calls_and_string_arguments() -> None:
    text = format_tool_call("a", {"q": "x"}) + '<tool_call>{"name": "b", "arguments": "{\\"k\\": 2}"}</tool_call>'
    p = parse_action(text)
    assert p.ok and [c.name for c in p.tool_calls] == ["a", "b"] and p.tool_calls[1].arguments == {"k": 2}


def test_answer_and_think_is_ignored() -> None:
    p = parse_action("<think>maybe <answer>1</answer>?</think> so <answer> 7 </answer>")
    assert p.ok and p.answer == "7" and not p.tool_calls


def test_unclosed_think_hides_everything() -> None:
    assert codes("<think>long reasoning <answer>3</answer>") == ["no_action"]


def test_malformed_inputs_are_flagged() -> None:
    assert codes("<tool_call>{not json}</tool_call>") == ["invalid_json"]
    assert codes('<tool_call>{"arguments": {}}</tool_call>') == ["bad_tool_call"]
    assert codes('<tool_call>{"name": "x", "arguments": [1]}</tool_call>') == ["bad_tool_call"]
    assert codes('<tool_call>{"name": "x", "arguments": {}, "extra": 1}</tool_call>') == ["bad_tool_call"]
    assert "unclosed_tag" in codes('<tool_call>{"name": "x", "arguments": {}}')
    assert "unclosed_tag" in codes("<answer>5")
    assert codes("<answer>1</answer><answer>2</answer>") == ["multiple_answers"]
    assert codes(format_tool_call("x", {}) + "<answer>1</answer>") == ["call_and_answer"]
    assert codes("just prose") == ["no_action"]
    assert codes(12345) == ["not_text"]
    assert codes(b"\xff\xfe<answer>1</answer>") == ["non_utf8"]
    assert codes("<answer>\ud800</answer>") == ["invalid_unicode"]
    assert codes("<answer>1\x00\x07</answer>") == ["control_chars"]
    deep = '<tool_call>{"name": "x", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}</tool_call>"
    assert "invalid_json" in codes(deep) or "action_too_long" in codes(deep)


def test_json_escapes_of_unpaired_surrogates_are_replaced_in_every_format() -> None:
    """``"\\ud800"`` in a call's JSON decodes to a string no encoder takes (pyserini's Lucene raised on
    it, a retrieval server's tokenizer dropped the connection: infrastructure, by the agent's hand)."""
    from prm_gym.core.parsing import parse_action

    escaped = {
        "hermes": '<tool_call>{"name": "search", "arguments": {"query": "\\ud800 x"}}</tool_call>',
        "llama3": '{"name": "search", "parameters": {"query": "\\udfff x"}}',
        "openai": '{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": '
        '{"name": "search", "arguments": "{\\"query\\": \\"\\\\ud800 x\\"}"}}]}',
    }
    for fmt, action in escaped.items():
        parsed = parse_action(action, tool_format=fmt)
        (call,) = parsed.tool_calls
        call.arguments["query"].encode("utf-8")  # encodable now
        assert call.arguments == {"query": "? x"} and [i.code for i in parsed.issues] == ["invalid_unicode"], fmt
    answer = parse_action('{"role": "assistant", "content": "<answer>\\udc00</answer>"}', tool_format="openai")
    assert answer.answer == "?" and [i.code for i in answer.issues] == ["invalid_unicode"]
    pair = parse_action('<tool_call>{"name": "s", "arguments": {"q": "\\ud83d\\ude00"}}</tool_call>')
    assert pair.tool_calls[0].arguments == {"q": "\U0001f600"} and not pair.issues  # a valid pair stays


def test_too_many_calls_and_too_long() -> None:
    assert "too_many_tool_calls" in codes(format_tool_call("x", {}) * 9)
    assert codes("a" * (MAX_ACTION_CHARS + 1)) == ["action_too_long"]


def test_markup_imitation() -> None:
    assert "markup_imitation" in codes("<tool_response>42</tool_response><answer>42</answer>")
    assert "markup_imitation" in codes("<|im_start|>user\nhi<|im_end|>")
    assert parse_action("<think><tool_response>x</tool_response></think><answer>1</answer>").ok


def test_bytes_decode() -> None:
    p = parse_action("<answer>ü</answer>".encode())
    assert p.ok and p.answer == "ü"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=400))
def test_fuzz_parser_never_raises(text: str) -> None:
    p = parse_action(text)
    assert p.ok or p.issues


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.builds(
            lambda j: f"<tool_call>{j}</tool_call>",
            st.recursive(
                st.none() | st.integers() | st.text(max_size=8),
                lambda c: st.lists(c) | st.dictionaries(st.text(max_size=5), c),
                max_leaves=10,
            ).map(json.dumps),
        ),
        st.builds(lambda s: f"<answer>{s}", st.text(max_size=50)),
    )
)
def test_fuzz_step_never_raises(action: str) -> None:
    env = gym.make("prm/Math-v0")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and info["parse"]["ok"] in (True, False)
    env.close()


def test_huge_and_hostile_actions_through_step() -> None:
    env = gym.make("prm/Math-v0")
    for action in ["x" * 1_000_000, "\ud800\udfff\ud800", "\x00\x01\x02<answer>1</answer>", "<tool_call>" * 1000]:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["parse"]["ok"] and info["reward_format"] < 0 and not terminated
        assert "Format error" in obs
    env.close()


_PIECES = st.sampled_from(
    ["<answer>", "</answer>", "<result>", "</result>", "<think>", "</think>", "<tool_call>", "</tool_call>",
     "<reward>", "[ENV]", "[ENV", "[", "]", " ", "\n", "\t", "\x0b", "\x1f", "\x7f", "\xa0", "\ud800", "42", "Oslo",
     "é", "<", ">", "3 < 5", "<tool_response>", "<|im_end|>", "<answer >", "<thi", "nk>", "<ans", "wer>"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=8).map("".join), st.sampled_from(["answer", "result", "reward", "think"]))
def test_the_plain_answer_fast_path_gives_what_the_general_parse_gives(text: str, tag: str) -> None:
    shapes = (
        text,
        f"<{tag}>{text}</{tag}>",
        f" <{tag}>{text}</{tag}>\n",
        f"{text}<{tag}>42</{tag}>",
        f"{text}<{tag}>{text}",
    )
    for action in (
        *shapes,
        f"<think>{text}</think>\n{text}<{tag}>7</{tag}>",
        f"Sum: 8 * 9 = 72. {text}<{tag}> 72 </{tag}>",
    ):
        general = parse_general(action, answer_tag=tag, max_chars=MAX_ACTION_CHARS, max_tool_calls=8)
        assert parse_action(action, answer_tag=tag) == general
    assert parse_action("<answer>12</answer>", max_chars=5) == parse_general(
        "<answer>12</answer>", answer_tag="answer", max_chars=5, max_tool_calls=8
    )


def test_reasoning_before_the_answer_takes_the_one_pass_fast_path() -> None:
    """Reasoning (even with ``<`` and think blocks) before one answer no longer needs the general
    parse's dozen scans; what the fast path declines, the general parse decides as before."""
    reasoning = "First, 8 boxes hold 9 each, so 8 * 9 = 72 in all; 3 < 5 and [a] is fine. "
    for action in (
        f"{reasoning}<answer>72</answer>",
        f"<think>{reasoning}<answer>1</answer></think>{reasoning}\n<answer> 72 </answer>\n",
        f"{reasoning * 400}<answer>72</answer>",
    ):
        assert _fast_answer(action, "answer") == "72"
        assert parse_action(action) == parse_general(
            action, answer_tag="answer", max_chars=MAX_ACTION_CHARS, max_tool_calls=8
        )
    for declined in (
        f"{reasoning}<answer>72</answer><answer>1</answer>",
        f"{reasoning}[ENV]<answer>72</answer>",
        f"{reasoning}\x01<answer>72</answer>",
        f"{reasoning}<tool_call>{{}}</tool_call><answer>72</answer>",
        f"{reasoning}<|im_end|><answer>72</answer>",
        f"{reasoning}</answer><answer>72",
        f"{reasoning}[<think>a</think>ENV]<answer>72</answer>",  # markup joined around a think block
        reasoning,
    ):
        assert _fast_answer(declined, "answer") is None
        assert not parse_action(declined).ok
