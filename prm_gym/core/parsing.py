"""The one tool-call parser, shared by envs, agents, evaluation and training.

An action is the assistant's raw text for one turn. It may hold reasoning (``<think>...</think>``
is ignored), one or more Hermes-style tool calls::

    <tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>

(the format of the Qwen2.5/Qwen3 and SmolLM2 chat templates), or a final answer in a tag::

    <answer>5</answer>

Parsing never raises on model output: every problem becomes a :class:`ParseIssue` with a short
code (used as a metric) and a message written for the agent (shown as the next observation).
A turn with any issue executes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from prm_gym.core.tool_formats import Extracted, ParseIssue, ToolCall, find_tagged, format_call, get_format

__all__ = ["ParseIssue", "ParsedAction", "ToolCall", "format_answer", "format_tool_call", "parse_action"]

#: Longest action the parser will look at, in characters; longer ones are flagged unparsed.
MAX_ACTION_CHARS = 32_768
#: Most tool calls accepted in one turn.
MAX_TOOL_CALLS = 8

#: Markup only the environment or the chat template may write. An action that contains it
#: imitates tool results, turn boundaries or reward lines, and is not trusted.
ENV_MARKUP: tuple[str, ...] = (
    "<tool_response>",
    "</tool_response>",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<reward>",
    "</reward>",
    "[ENV]",
)

_THINK_RE = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class ParsedAction(NamedTuple):
    """The result of :func:`parse_action` (an immutable named tuple: one is built every step)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    issues: tuple[ParseIssue, ...] = ()
    tool_format: str = "hermes"

    @property
    def ok(self) -> bool:
        """True when the action parsed cleanly (something to do and no issue)."""
        return not self.issues

    def describe_issues(self) -> str:
        return "\n".join(f"Format error ({i.code}): {i.message}" for i in self.issues)


#: Builds a :class:`ParsedAction` from a tuple of all its fields, for the fast paths of
#: :func:`parse_action`: half the cost of ``ParsedAction(...)``, whose ``__new__`` is a Python function.
_new_parsed = tuple.__new__


def format_tool_call(name: str, arguments: dict[str, Any], tool_format: str = "hermes") -> str:
    """Render a tool call the way the parser expects it in ``tool_format``."""
    return format_call(name, arguments, tool_format)


def format_answer(answer: str, tag: str = "answer") -> str:
    return f"<{tag}>{answer}</{tag}>"


def coerce_text(action: Any) -> tuple[str, list[ParseIssue]]:
    """Turn any action into a clean ``str`` and the issues met on the way.

    Bytes are decoded as UTF-8 (undecodable bytes flagged), lone surrogates are replaced and
    flagged, and control characters other than newline, tab and carriage return are removed and
    flagged.
    """
    issues: list[ParseIssue] = []
    if isinstance(action, bytes | bytearray):
        try:
            text = bytes(action).decode("utf-8")
        except UnicodeDecodeError:
            text = bytes(action).decode("utf-8", errors="replace")
            issues.append(ParseIssue("non_utf8", "The action is not valid UTF-8."))
    elif isinstance(action, str):
        text = action
    else:
        return "", [ParseIssue("not_text", f"The action must be text, got {type(action).__name__}.")]
    encodable = _encodable(text)
    if encodable is not text:
        text = encodable
        issues.append(ParseIssue("invalid_unicode", "The action holds unpaired surrogates."))
    if _CONTROL_RE.search(text):
        text = _CONTROL_RE.sub("", text)
        issues.append(ParseIssue("control_chars", "The action holds control characters."))
    return text, issues


#: Tags that send an action to the general parse: tool calls and the markup that is a tag.
_GENERAL_TAGS = ("<tool_call>", "</tool_call>", *(m for m in ENV_MARKUP if m.startswith("<")))
_UNTAGGED_MARKUP_TEXT = tuple(m for m in ENV_MARKUP if not m.startswith("<"))
_UNTAGGED_MARKUP = tuple(m.encode() for m in _UNTAGGED_MARKUP_TEXT)
#: The first bytes of the untagged markup (``[`` of ``[ENV]``), each counted when present.
_MARK_FIRST = tuple(bytes([b]) for b in sorted({m[0] for m in _UNTAGGED_MARKUP}))
#: Bytes whose presence sends an action to a closer look: the control characters the general
#: parse removes and flags, and the first bytes of the untagged markup.
_CTRL_OR_MARK = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F, *b"".join(_MARK_FIRST)])
_SIMPLE_TAG = re.compile(r"[\w.-]+")


@lru_cache(maxsize=64)
def _fast_tags(tag: str) -> tuple[str, str] | None:
    """``(<tag>, </tag>)`` when :func:`_fast_answer` may handle ``tag``; None for a tag that is
    markup itself, one the parser gives another meaning (``think``, ``tool_call``) or one with
    unusual characters (whose occurrences could overlap other tags)."""
    open_t, close_t = f"<{tag}>", f"</{tag}>"
    if tag in ("think", "tool_call") or not _SIMPLE_TAG.fullmatch(tag):
        return None
    if any(m in open_t + close_t for m in ENV_MARKUP):
        return None
    return open_t, close_t


#: Up to this length, a turn is first tried against one regular expression (cheapest for short
#: turns); longer ones go straight to :func:`_fast_answer`'s C-level scans.
_SHORT = 256
#: A character the general parse passes over untouched: no tag start, no ``[``, no control
#: character, no surrogate.
_PLAIN = r"[^<\[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]"


@lru_cache(maxsize=64)
def _short_answer_pattern(tag: str) -> re.Pattern[str] | None:
    """Plain reasoning, then ``<tag>plain body</tag>`` and trailing whitespace: a turn the general
    parse accepts as exactly that answer with no issue (None for a tag :func:`_fast_tags` refuses)."""
    tags = _fast_tags(tag)
    if tags is None:
        return None
    open_t, close_t = (re.escape(t) for t in tags)
    return re.compile(rf"{_PLAIN}*{open_t}({_PLAIN}*){close_t}[ \t\n\r]*")


def _fast_answer(text: str, answer_tag: str) -> str | None:
    """The answer of a turn that is reasoning (``<think>`` blocks allowed) then exactly one
    ``<tag>...</tag>``, with no tool call, markup or control character: what the general parse
    returns for it, found in one pass that deletes nothing (control bytes and ``[``, the first byte
    of ``[ENV]``) and hops between ``<`` characters. None when the general parse must decide (it
    then flags, or accepts, exactly as before)."""
    tags = _fast_tags(answer_tag)
    if tags is None:
        return None
    try:
        raw = text.encode("utf-8")  # lone surrogates raise; UTF-8 never hides a byte < 0x80
    except UnicodeEncodeError:
        return None
    dropped = len(raw) - len(raw.translate(None, _CTRL_OR_MARK))
    if dropped and (dropped != sum(map(raw.count, _MARK_FIRST)) or any(m in raw for m in _UNTAGGED_MARKUP)):
        return None  # a control character, or markup
    open_t, close_t = tags
    opened = text.find("<")  # the usual turn: no "<" before the answer tag, none after its end
    if text.startswith(open_t, opened):
        closed = text.find("<", opened + len(open_t))
        if text.startswith(close_t, closed) and text.find("<", closed + 1) < 0:
            return text[opened + len(open_t) : closed].strip()
    visible, opened, closed = text, -1, -1
    i = visible.find("<")
    while i >= 0:
        if visible.startswith(open_t, i):
            if opened >= 0:
                return None
            opened = i
        elif visible.startswith(close_t, i):
            if closed >= 0 or opened < 0:
                return None
            closed = i
        elif visible.startswith(_GENERAL_TAGS, i):
            return None
        elif visible is text and visible.startswith("<think>", i):  # drop think blocks, rescan once
            visible, opened, closed = _THINK_RE.sub("", text), -1, -1
            if any(m in visible for m in _UNTAGGED_MARKUP_TEXT):  # markup joined around a removed block
                return None
            i = visible.find("<")
            continue
        i = visible.find("<", i + 1)
    if closed < 0:
        return None
    return visible[opened + len(open_t) : closed].strip()


def parse_action(
    action: Any,
    *,
    answer_tag: str = "answer",
    max_chars: int = MAX_ACTION_CHARS,
    max_tool_calls: int = MAX_TOOL_CALLS,
    tool_format: str = "hermes",
) -> ParsedAction:
    """Parse one assistant turn. Never raises on model output.

    Args:
        action: the raw action (normally ``str``; bytes and other types are flagged; under the
            ``openai`` format a message dict is taken as its JSON).
        answer_tag: the tag that holds the final answer.
        max_chars: actions longer than this are flagged ``action_too_long`` and not parsed.
        max_tool_calls: more calls than this in one turn are flagged ``too_many_tool_calls``.
        tool_format: how tool calls are written (:data:`prm_gym.core.tool_formats.FORMATS`).

    Raises:
        ConfigError: an unknown ``tool_format`` (a caller's mistake, never the model's output).
    """
    if tool_format == "hermes" and isinstance(action, str) and len(action) <= max_chars:  # fast paths
        short = _short_answer_pattern(answer_tag) if len(action) <= _SHORT else None
        found = short.fullmatch(action) if short is not None else None
        if found is not None:
            return _new_parsed(ParsedAction, (action, (), found.group(1).strip(), (), "hermes"))
        answer = _fast_answer(action, answer_tag)
        if answer is not None:
            return _new_parsed(ParsedAction, (action, (), answer, (), "hermes"))
    return parse_general(
        action, answer_tag=answer_tag, max_chars=max_chars, max_tool_calls=max_tool_calls, tool_format=tool_format
    )


def _as_text(action: Any, tool_format: str) -> Any:
    """An openai-format message dict as its JSON text (anything else unchanged)."""
    if tool_format == "openai" and isinstance(action, Mapping):
        try:
            return json.dumps(dict(action), ensure_ascii=False)
        except (TypeError, ValueError):
            return action
    return action


def parse_general(
    action: Any, *, answer_tag: str, max_chars: int, max_tool_calls: int, tool_format: str = "hermes"
) -> ParsedAction:
    """:func:`parse_action` without its fast path (which must always give what this gives)."""
    fmt = get_format(tool_format)
    action = _as_text(action, tool_format)
    text, issues = coerce_text(action)
    if not isinstance(action, str | bytes | bytearray):
        return ParsedAction(text, issues=tuple(issues), tool_format=tool_format)
    if len(text) > max_chars:
        issues.append(
            ParseIssue("action_too_long", f"The action has {len(text)} characters; the limit is {max_chars}.")
        )
        return ParsedAction(text[:max_chars], issues=tuple(issues), tool_format=tool_format)
    visible = _THINK_RE.sub("", text) if "<think>" in text else text
    found = fmt.extract(visible, answer_tag, max_tool_calls)
    if "\\u" in visible:  # only a JSON escape can put an unpaired surrogate past coerce_text
        found, replaced = _surrogates_replaced(found)
        if replaced:
            issues.append(
                ParseIssue("invalid_unicode", "A JSON escape in the action encodes an unpaired surrogate (replaced).")
            )
    imitated = [m for m in ENV_MARKUP if m in visible or (found.text is not visible and m in found.text)]
    if imitated:
        issues.append(
            ParseIssue(
                "markup_imitation",
                f"The action contains environment markup {imitated[:3]}; only the environment writes it.",
            )
        )
    answers, answer_balanced = find_tagged(found.text, answer_tag)
    issues += found.structural
    if not answer_balanced:
        issues.append(ParseIssue("unclosed_tag", f"Every <{answer_tag}> needs a matching </{answer_tag}>."))
    issues += found.call_issues
    if found.attempts > max_tool_calls:
        issues.append(ParseIssue("too_many_tool_calls", f"At most {max_tool_calls} tool calls per turn."))
    answer: str | None = None
    if len(answers) > 1:
        issues.append(ParseIssue("multiple_answers", f"Give exactly one <{answer_tag}>."))
    elif answers:
        answer = answers[0].strip()
        if found.attempts:
            issues.append(
                ParseIssue("call_and_answer", "Either call tools or give the final answer, not both in one turn.")
            )
    if not found.attempts and not answers and not found.structural and answer_balanced and not imitated:
        issues.append(
            ParseIssue(
                "no_action",
                f"No tool call and no answer found. Call a tool with {fmt.hint or fmt.syntax} "
                f"or answer with <{answer_tag}>...</{answer_tag}>.",
            )
        )
    return ParsedAction(text, found.calls, answer, tuple(issues), tool_format)


def _encodable(text: str) -> str:
    """``text`` itself, or a copy with its unpaired surrogates (which no encoder takes) replaced by "?"."""
    if text.isascii():  # only non-ASCII text can hold surrogates
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace").decode("utf-8")


def _clean(value: Any) -> Any:
    """``value`` with unpaired surrogates in its strings (keys included) replaced (:func:`_encodable`)."""
    if isinstance(value, str):
        return _encodable(value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _surrogates_replaced(found: Extracted) -> tuple[Extracted, bool]:
    """``found`` with the unpaired surrogates its JSON escapes decoded to (``"\\ud800"``) replaced in
    the calls' names and arguments and in the text the answer is read from (an openai message's
    content), and whether there were any: no tool, judge or index then meets text that cannot be
    encoded, which would otherwise fail outside the agent's turn (a Lucene query raised)."""
    calls = tuple(dataclasses.replace(c, name=_clean(c.name), arguments=_clean(c.arguments)) for c in found.calls)
    text = _clean(found.text)
    if calls == found.calls and text == found.text:
        return found, False
    return found._replace(calls=calls, text=text), True
