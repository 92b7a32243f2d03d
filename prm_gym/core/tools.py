"""Tools: plain Python functions exposed to the agent with an OpenAI function schema.

A :class:`Tool` wraps a callable. Its JSON schema is derived from the type hints and the
Google-style docstring (``Args:`` section) unless given explicitly, so
``Tool.from_function(get_forecast)`` is all a user writes. :class:`ToolResult` is what one call
produced, as the env shows it to the agent and passes it to judges.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prm_gym.core.errors import ConfigError

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call.

    Attributes:
        name: the tool called.
        ok: False when the call failed (bad arguments, tool error, infra failure).
        output: the text shown to the agent.
        latency_s: wall-clock seconds the call took.
        infra_error: True when the failure is the infrastructure's, not the agent's.
    """

    name: str
    ok: bool
    output: str
    latency_s: float = 0.0
    infra_error: bool = False


def _json_type(hint: Any, where: str) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if origin in (list, tuple, set, frozenset):
        args = typing.get_args(hint)
        return {"type": "array", "items": _json_type(args[0], where) if args else {}}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if origin is typing.Literal:
        vals = list(typing.get_args(hint))
        return {"type": _JSON_TYPES.get(type(vals[0]), "string"), "enum": vals}
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(inner) == 1:
            return _json_type(inner[0], where)
    raise ConfigError(
        f"{where}: type {hint!r} cannot be expressed as a JSON schema; use str, int, float, bool, "
        "list[...], dict, Literal[...] or Optional of one of them."
    )


def _doc_args(doc: str) -> tuple[str, dict[str, str]]:
    """The summary and the per-argument descriptions of a Google-style docstring."""
    summary = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
    args: dict[str, str] = {}
    m = re.search(r"^\s*Args:\s*\n(.*?)(?:^\s*\w+:\s*$|\Z)", doc, re.DOTALL | re.MULTILINE)
    if m:
        for line in m.group(1).splitlines():
            am = re.match(r"\s*(\w+)(?:\s*\(.*?\))?:\s*(.*)", line)
            if am:
                args[am.group(1)] = am.group(2).strip()
    return summary, args


def function_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """OpenAI function-calling schema of ``fn`` from its signature, hints and docstring.

    Raises:
        ConfigError: a parameter has no type hint or a type JSON cannot express.
    """
    tool_name = name or fn.__name__
    where = f"tool {tool_name!r}"
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # unresolvable forward references
        raise ConfigError(f"{where}: cannot resolve type hints ({exc}).") from exc
    summary, arg_docs = _doc_args(inspect.getdoc(fn) or "")
    props: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if pname not in hints:
            raise ConfigError(f"{where}: parameter {pname!r} has no type hint; add one (e.g. `{pname}: str`).")
        prop = _json_type(hints[pname], f"{where}, parameter {pname!r}")
        if pname in arg_docs:
            prop["description"] = arg_docs[pname]
        props[pname] = prop
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    return {
        "type": "function",
        "function": {
            "name": tool_name,
            "description": summary or tool_name,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


@dataclass(frozen=True)
class Tool:
    """A callable the agent may invoke, with its OpenAI function schema."""

    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any] = field(compare=False)

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> Tool:
        schema = function_schema(fn, name)
        return cls(schema["function"]["name"], fn, schema)

    def typed_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``arguments`` written as text (Qwen3-Coder's XML parameters) with each value the schema
        types as a number, boolean, array or object decoded from JSON where it decodes; strings,
        and values that do not decode, stay as written (:meth:`check_arguments` then judges them)."""
        props = self.schema["function"]["parameters"].get("properties", {})
        typed = dict(arguments)
        for key, value in arguments.items():
            want = props.get(key, {}).get("type") if isinstance(props.get(key), dict) else None
            if isinstance(value, str) and want in ("integer", "number", "boolean", "array", "object"):
                with contextlib.suppress(ValueError, RecursionError):
                    typed[key] = json.loads(value.strip())
        return typed

    def check_arguments(self, arguments: dict[str, Any]) -> str | None:
        """A message for the agent if ``arguments`` do not fit the schema, else None."""
        params = self.schema["function"]["parameters"]
        props, required = params.get("properties", {}), params.get("required", [])
        missing = [r for r in required if r not in arguments]
        unknown = [k for k in arguments if k not in props]
        if missing or unknown:
            return (
                f"Tool {self.name!r}: missing arguments {missing}, unknown arguments {unknown}; "
                f"expected {sorted(props)}."
            )
        for key, value in arguments.items():
            want = props[key].get("type")
            if want == "string" and not isinstance(value, str):
                return f"Tool {self.name!r}: argument {key!r} must be a string."
            if want in ("integer", "number") and (isinstance(value, bool) or not isinstance(value, int | float)):
                return f"Tool {self.name!r}: argument {key!r} must be a number."
        return None
