"""Tool-call formats: how each model family writes a tool call, parsed and rendered in one place.

A policy writes tool calls the way its chat template taught it. The registry :data:`FORMATS`
holds one :class:`ToolFormat` per family; :func:`prm_gym.core.parsing.parse_action` takes its
``tool_format`` and the prompt (:class:`prm_gym.agents.chat.ChatTemplate`) describes the same one:

* ``hermes`` (default): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  (Hermes, Qwen2.5 / Qwen3, SmolLM templates).
* ``llama3``: a bare JSON object ``{"name": ..., "parameters": {...}}``, optionally after
  ``<|python_tag|>``; several may be separated by ``;`` (Llama 3.1 / 3.2 / 3.3 JSON tool calling).
* ``mistral``: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}]``, the newer
  ``[TOOL_CALLS]name[ARGS]{...}``, and either one with its control tokens decoded away.
* ``qwen``: hermes' tags, plus Qwen3-Coder's ``<tool_call><function=NAME><parameter=ARG>value
  </parameter></function></tool_call>`` and what Qwen2.5-Coder emits instead of tags: JSON inside
  ``<tools></tools>``, in a fenced ```` ```json ```` block, or bare.
* ``openai``: an assistant message as JSON (or a dict action) with
  ``"tool_calls": [{"type": "function", "function": {"name": ..., "arguments": "<JSON string>"}}]``.

Extraction never raises on model output: a malformed call becomes a :class:`ParseIssue`, which the
env scores as the agent's format failure. The call types and the scanning helpers every parser shares
live in :mod:`prm_gym.core.tool_scan` (the call types are re-exported here); this module holds the
formats themselves and their registry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.tool_scan import (
    JSON_DECODER,
    Extracted,
    ParseIssue,
    ToolCall,
    call_from_object,
    collect_calls,
    find_tagged,
    flatten_calls,
    invalid_json,
    json_spans,
    load_json,
    unclosed_tag,
    without_tagged,
)

__all__ = [
    "FORMATS",
    "FORMAT_NAMES",
    "Extracted",
    "ParseIssue",
    "ToolCall",
    "ToolFormat",
    "call_from_object",
    "find_tagged",
    "format_call",
    "get_format",
]

FORMAT_NAMES = ("hermes", "llama3", "mistral", "qwen", "openai")


@dataclass(frozen=True)
class ToolFormat:
    """One tool-call format: its parser, its renderer and how prompts describe it.

    Attributes:
        name: the registry key (``--tool-format``).
        extract: ``(visible text, answer tag, max calls) -> Extracted``.
        render: ``(name, arguments) -> text`` of one call, as the parser accepts it.
        syntax: the call syntax in one line, shown in compact prompts and format errors.
        how_to_call: the instructions after the tool schemas in the full prompt block.
        hint: the call syntax named by the ``no_action`` format error (default: ``syntax``).
    """

    name: str
    extract: Callable[[str, str, int], Extracted]
    render: Callable[[str, dict[str, Any]], str]
    syntax: str
    how_to_call: str
    hint: str = ""


# ----------------------------------------------------------------------------- hermes
def _hermes_call(body: str) -> Any:
    return call_from_object(load_json(body.strip()))


def _extract_hermes(visible: str, answer_tag: str, max_calls: int) -> Extracted:
    bodies, balanced = find_tagged(visible, "tool_call")
    structural = () if balanced else (unclosed_tag("tool_call"),)
    return collect_calls(map(_hermes_call, bodies), max_calls, visible, structural)


def _render_hermes(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>{ToolCall(name, arguments).to_json()}</tool_call>"


# ----------------------------------------------------------------------------- llama3
_PYTHON_TAG = "<|python_tag|>"
_LLAMA_START = re.compile(r'\{\s*"(?:name|type|parameters|arguments)"\s*:')


def _llama_call(obj: Any) -> Any:
    if isinstance(obj, dict) and obj.get("type", "function") != "function":
        return ParseIssue("bad_tool_call", 'A tool call\'s "type" may only be "function".')
    return call_from_object(obj, ("parameters", "arguments"), allowed=("type",))


def _extract_llama3(visible: str, answer_tag: str, max_calls: int) -> Extracted:
    scan = without_tagged(visible, answer_tag)
    tagged = _PYTHON_TAG in scan
    scan = scan.replace(_PYTHON_TAG, " ").replace("<|eom_id|>", " ")
    found = collect_calls((_llama_call(v) for v, _, _ in json_spans(scan, _LLAMA_START)), max_calls, visible)
    if tagged and not found.attempts:
        msg = 'After <|python_tag|> give a JSON object {"name": "<tool>", "parameters": {...}}.'
        return found._replace(call_issues=(ParseIssue("bad_tool_call", msg),), attempts=1)
    return found


def _render_llama3(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)


# ----------------------------------------------------------------------------- mistral
_TOOL_CALLS = "[TOOL_CALLS]"
_MISTRAL_LIST = re.compile(r'\[\s*\{\s*"name"\s*:')
_MISTRAL_NAMED = re.compile(r"\s*([A-Za-z_][\w.-]*)\s*(?:\[ARGS\])?\s*(?=\{)")
_MISTRAL_STRIPPED = re.compile(r"\s*[A-Za-z_][\w.-]*\s*\{")


def _mistral_call(obj: Any) -> Any:
    return call_from_object(obj, allowed=("id",))


def _mistral_segment(seg: str) -> Iterator[Any]:
    """The calls after one ``[TOOL_CALLS]``: a JSON list (or object), or ``name[ARGS]{...}``."""
    named = _MISTRAL_NAMED.match(seg)
    try:
        if named is not None:
            args, _ = JSON_DECODER.raw_decode(seg, named.end())
            yield _mistral_call({"name": named.group(1), "arguments": args})
            return
        start = len(seg) - len(seg.lstrip())
        if seg[start : start + 1] in ("[", "{"):
            value, _ = JSON_DECODER.raw_decode(seg, start)
            yield from flatten_calls(value, _mistral_call)
            return
    except (ValueError, RecursionError) as exc:
        yield invalid_json(exc)
        return
    yield ParseIssue("bad_tool_call", 'After [TOOL_CALLS] give a JSON list [{"name": "<tool>", "arguments": {...}}].')


def _mistral_items(scan: str) -> Iterator[Any]:
    if _TOOL_CALLS in scan:
        for seg in scan.split(_TOOL_CALLS)[1:]:
            yield from _mistral_segment(seg)
        return
    spans = list(json_spans(scan, _MISTRAL_LIST))
    if spans:  # the control token decoded away: a bare list of calls
        for value, _, _ in spans:
            yield from flatten_calls(value, _mistral_call)
    elif _MISTRAL_STRIPPED.match(scan):
        yield from _mistral_segment(scan)  # name[ARGS]{...} with its control tokens decoded away


def _extract_mistral(visible: str, answer_tag: str, max_calls: int) -> Extracted:
    return collect_calls(_mistral_items(without_tagged(visible, answer_tag)), max_calls, visible)


def _render_mistral(name: str, arguments: dict[str, Any]) -> str:
    return _TOOL_CALLS + " " + json.dumps([{"name": name, "arguments": arguments}], ensure_ascii=False)


# ----------------------------------------------------------------------------- qwen
_FUNCTION_RE = re.compile(r"<function=([^>\n]+)>(.*)</function>", re.DOTALL)
_PARAMETER = "<parameter="
_NON_SPACE = re.compile(r"\S")
_FENCED_RE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_BARE_START = re.compile(r'(?:\[\s*)?\{\s*"name"\s*:')


def _xml_call(body: str) -> Any:
    """Qwen3-Coder's ``<function=NAME><parameter=ARG>value</parameter>...</function>`` (one pass)."""
    bad = ParseIssue("bad_tool_call", "Write the call as <function=NAME><parameter=ARG>value</parameter></function>.")
    m = _FUNCTION_RE.fullmatch(body.strip())
    if m is None or not m.group(1).strip():
        return bad
    args: dict[str, Any] = {}
    inner, pos = m.group(2), 0
    while (start := _NON_SPACE.search(inner, pos)) is not None:
        i = start.start()
        head = inner.find(">", i)
        end = inner.find("</parameter>", head)
        key = inner[i + len(_PARAMETER) : head].strip() if inner.startswith(_PARAMETER, i) and head >= 0 else ""
        if not key or "\n" in key or end < 0 or key in args:
            return bad
        value = inner[head + 1 : end]
        value = value[1:] if value.startswith("\n") else value
        args[key] = value[:-1] if value.endswith("\n") else value
        pos = end + len("</parameter>")
    return ToolCall(m.group(1).strip(), args, text_arguments=True)


def _qwen_tagged(body: str) -> Any:
    return _xml_call(body) if body.lstrip().startswith("<function=") else _hermes_call(body)


def _qwen_json_bodies(bodies: Iterable[str]) -> Iterator[Any]:
    for body in bodies:
        value = load_json(body.strip())
        yield from [value] if isinstance(value, ParseIssue) else flatten_calls(value, call_from_object)


def _extract_qwen(visible: str, answer_tag: str, max_calls: int) -> Extracted:
    scan = without_tagged(visible, answer_tag)
    bodies, balanced = find_tagged(scan, "tool_call")
    if bodies or not balanced:
        return collect_calls(
            map(_qwen_tagged, bodies), max_calls, visible, () if balanced else (unclosed_tag("tool_call"),)
        )
    tools, balanced = find_tagged(scan, "tools")  # Qwen2.5-Coder's <tools>{...}</tools>
    if tools or not balanced:
        return collect_calls(_qwen_json_bodies(tools), max_calls, visible, () if balanced else (unclosed_tag("tools"),))
    fenced = [b for b in _FENCED_RE.findall(scan) if _BARE_START.match(b.strip())]
    if fenced:
        return collect_calls(_qwen_json_bodies(fenced), max_calls, visible)
    spans = (v for v, _, _ in json_spans(scan, _BARE_START))
    items = (x for v in spans for x in ([v] if isinstance(v, ParseIssue) else flatten_calls(v, call_from_object)))
    return collect_calls(items, max_calls, visible)


def _render_qwen(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>\n{ToolCall(name, arguments).to_json()}\n</tool_call>"


# ----------------------------------------------------------------------------- openai
_MESSAGE_START = re.compile(r'\{\s*"(?:role|content|tool_calls)"\s*:')


def _openai_call(item: Any) -> Any:
    shape = 'Each tool call is {"type": "function", "function": {"name": "<tool>", "arguments": "<JSON>"}}.'
    if not isinstance(item, dict) or item.get("type", "function") != "function":
        return ParseIssue("bad_tool_call", shape)
    if set(item) - {"type", "id", "function", "index"}:
        return call_from_object(item)  # lenient: {"name": ..., "arguments": ...} without "function"
    function = item.get("function")
    if not isinstance(function, dict):
        return ParseIssue("bad_tool_call", shape)
    if isinstance(function.get("arguments"), str):  # the API's form: the arguments as a JSON string
        args = load_json(function["arguments"])
        if isinstance(args, ParseIssue):
            return args
        function = {**function, "arguments": args}
    return call_from_object(function)


def _message_items(message: Any) -> Iterator[Any]:
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        yield ParseIssue("bad_tool_call", '"tool_calls" must be a JSON list.')
        return
    yield from map(_openai_call, calls)


def _extract_openai(visible: str, answer_tag: str, max_calls: int) -> Extracted:
    """Assistant messages as JSON objects: their tool calls, and their content where the answer is looked for."""
    items: list[Any] = []
    text, pos = [], 0
    for value, start, end in json_spans(visible, _MESSAGE_START):
        text.append(visible[pos:start])
        pos = end
        if isinstance(value, dict):
            items.extend(_message_items(value))
            content = value.get("content")
            text.append(content if isinstance(content, str) else "")
        else:
            items.append(value if isinstance(value, ParseIssue) else ParseIssue("bad_tool_call", "Not a message."))
    return collect_calls(items, max_calls, "".join([*text, visible[pos:]]))


def _render_openai(name: str, arguments: dict[str, Any]) -> str:
    call = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
    return json.dumps({"role": "assistant", "content": None, "tool_calls": [call]}, ensure_ascii=False)


# ----------------------------------------------------------------------------- the registry
_HERMES_HOW = (
    "To call a tool, reply with a JSON object naming it and giving its arguments, inside <tool_call></tool_call>:\n"
    '<tool_call>\n{"name": "<tool name>", "arguments": {"<argument>": <value>}}\n</tool_call>'
)

FORMATS: dict[str, ToolFormat] = {
    "hermes": ToolFormat(
        "hermes",
        _extract_hermes,
        _render_hermes,
        '<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
        _HERMES_HOW,
        hint="<tool_call>{...}</tool_call>",
    ),
    "llama3": ToolFormat(
        "llama3",
        _extract_llama3,
        _render_llama3,
        '{"name": ..., "parameters": {...}}',
        "To call a tool, reply with only a JSON object naming it and giving its arguments as parameters:\n"
        '{"name": "<tool name>", "parameters": {"<argument>": <value>}}',
    ),
    "mistral": ToolFormat(
        "mistral",
        _extract_mistral,
        _render_mistral,
        '[TOOL_CALLS] [{"name": ..., "arguments": {...}}]',
        "To call tools, reply with [TOOL_CALLS] and a JSON list of calls, each naming a tool and giving its "
        "arguments:\n"
        '[TOOL_CALLS] [{"name": "<tool name>", "arguments": {"<argument>": <value>}}]',
    ),
    "qwen": ToolFormat(
        "qwen", _extract_qwen, _render_qwen, '<tool_call>{"name": ..., "arguments": {...}}</tool_call>', _HERMES_HOW
    ),
    "openai": ToolFormat(
        "openai",
        _extract_openai,
        _render_openai,
        '{"tool_calls": [{"type": "function", "function": {"name": ..., "arguments": "{...}"}}]}',
        "To call tools, reply with an assistant message as JSON whose tool_calls list names each tool and gives its "
        "arguments as a JSON string:\n"
        '{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": '
        '{"name": "<tool name>", "arguments": "{\\"<argument>\\": <value>}"}}]}',
    ),
}


def get_format(name: str) -> ToolFormat:
    """The registered format ``name``.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
    """
    fmt = FORMATS.get(name)
    if fmt is None:
        raise ConfigError(f"tool_format={name!r} is unknown; use auto or one of {', '.join(FORMAT_NAMES)}.")
    return fmt


def format_call(name: str, arguments: dict[str, Any], tool_format: str = "hermes") -> str:
    """One tool call written in ``tool_format``, as its parser accepts it."""
    return get_format(tool_format).render(name, arguments)
