"""Tool-call scanning: the parsed-call types and the JSON and tag scanning every tool format shares.

A format's parser (:mod:`prm_gym.core.tool_formats`) finds call attempts in a turn's text and
turns each into a :class:`ToolCall` or a :class:`ParseIssue`; the helpers here do the common parts:
bodies of ``<tag>...</tag>`` blocks, JSON values found by a start pattern, the ``{"name": ...,
"arguments": {...}}`` object check, and the per-turn tally (:class:`Extracted`). Nothing here
raises on model output: a malformed call becomes a :class:`ParseIssue`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

JSON_DECODER = json.JSONDecoder()
"""One shared decoder for ``raw_decode`` (a JSON value that starts mid-text)."""


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call.

    ``text_arguments`` marks arguments written as plain text (Qwen3-Coder's XML parameters): the
    env converts them to the types the tool's schema asks for before checking them.
    """

    name: str
    arguments: dict[str, Any]
    text_arguments: bool = field(default=False, compare=False, repr=False)

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "arguments": self.arguments}, ensure_ascii=False)


@dataclass(frozen=True)
class ParseIssue:
    """Why (part of) an action could not be used."""

    code: str
    message: str


class Extracted(NamedTuple):
    """The tool calls one format found in a turn.

    Attributes:
        calls: the calls that decoded cleanly.
        structural: problems with the markup itself (an unclosed tag), reported first.
        call_issues: problems with individual calls (invalid JSON, a wrong shape).
        attempts: call attempts seen, decoded or not (compared with the per-turn limit).
        text: the text the final answer is looked for in.
    """

    calls: tuple[ToolCall, ...]
    structural: tuple[ParseIssue, ...]
    call_issues: tuple[ParseIssue, ...]
    attempts: int
    text: str


@lru_cache(maxsize=64)
def _tag_pattern(tag: str) -> tuple[str, str, re.Pattern[str]]:
    """The opening tag, the closing tag and the compiled body pattern of ``tag`` (built once)."""
    open_t, close_t = f"<{tag}>", f"</{tag}>"
    return open_t, close_t, re.compile(re.escape(open_t) + r"(.*?)" + re.escape(close_t), re.DOTALL)


def find_tagged(text: str, tag: str) -> tuple[list[str], bool]:
    """Bodies of ``<tag>...</tag>`` and whether every opened tag was closed."""
    open_t, close_t, pattern = _tag_pattern(tag)
    if open_t not in text and close_t not in text:
        return [], True
    last = text.rfind(close_t)  # no match ends past the last closing tag: never scan beyond it
    bodies = pattern.findall(text, 0, last + len(close_t)) if last >= 0 else []
    balanced = text.count(open_t) == len(bodies) == text.count(close_t)
    return bodies, balanced


def without_tagged(text: str, tag: str) -> str:
    """``text`` without its ``<tag>...</tag>`` blocks (calls are never looked for in the answer)."""
    open_t, close_t, pattern = _tag_pattern(tag)
    end = text.rfind(close_t) + len(close_t)  # as in find_tagged: never scan past the last closing tag
    return pattern.sub(" ", text[:end]) + text[end:] if open_t in text and end >= len(close_t) else text


def invalid_json(exc: BaseException) -> ParseIssue:
    """The ``invalid_json`` issue for a JSON decoding error ``exc``."""
    return ParseIssue("invalid_json", f"The tool call is not valid JSON ({str(exc)[:200]}).")


def load_json(body: str) -> Any:
    """The JSON value of ``body``, or an ``invalid_json`` issue."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        return invalid_json(exc)


def json_spans(text: str, start: re.Pattern[str]) -> Iterator[tuple[Any, int, int]]:
    """JSON values that begin where ``start`` matches, with their spans; a value that does not
    decode yields an ``invalid_json`` issue and ends the scan (the turn runs nothing anyway)."""
    pos = 0
    while (m := start.search(text, pos)) is not None:
        try:
            value, end = JSON_DECODER.raw_decode(text, m.start())
        except (ValueError, RecursionError) as exc:
            yield invalid_json(exc), m.start(), len(text)
            return
        yield value, m.start(), end
        pos = end


def call_from_object(obj: Any, arg_keys: tuple[str, ...] = ("arguments",), allowed: Iterable[str] = ()) -> Any:
    """A :class:`ToolCall` from a decoded ``{"name": ..., "<arg key>": {...}}`` object, or the
    :class:`ParseIssue` saying what is wrong with it. Arguments given as a JSON string are decoded."""
    if isinstance(obj, ParseIssue):
        return obj
    key = arg_keys[0]
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return ParseIssue("bad_tool_call", f'A tool call must be a JSON object {{"name": "<tool>", "{key}": {{...}}}}.')
    present = [k for k in arg_keys if k in obj]
    if len(present) > 1:
        return ParseIssue("bad_tool_call", f"Give the arguments once, as {key!r}.")
    args = obj[present[0]] if present else {}
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            args = None
    if not isinstance(args, dict):
        return ParseIssue("bad_tool_call", f'"{present[0] if present else key}" must be a JSON object.')
    extra = set(obj) - {"name", *arg_keys, *allowed}
    if extra:
        return ParseIssue("bad_tool_call", f"Unexpected keys in the tool call: {sorted(extra)}.")
    return ToolCall(obj["name"], args)


def collect_calls(items: Iterable[Any], max_calls: int, text: str, structural: Iterable[ParseIssue] = ()) -> Extracted:
    """Calls and issues from decoded ``items`` (ToolCall or ParseIssue), at most ``max_calls + 1`` looked at."""
    calls: list[ToolCall] = []
    issues: list[ParseIssue] = []
    attempts = 0
    for item in items:
        attempts += 1
        if attempts > max_calls + 1:
            continue
        (issues if isinstance(item, ParseIssue) else calls).append(item)
    return Extracted(tuple(calls), tuple(structural), tuple(issues), attempts, text)


def unclosed_tag(tag: str) -> ParseIssue:
    """The ``unclosed_tag`` issue for an unbalanced ``<tag>``."""
    return ParseIssue("unclosed_tag", f"Every <{tag}> needs a matching </{tag}>.")


def flatten_calls(value: Any, decode: Callable[[Any], Any]) -> Iterator[Any]:
    """One decoded call per element of a JSON list, or the one call of an object."""
    if isinstance(value, list) and value:
        for item in value:
            yield decode(item)
    else:
        yield decode(value)
