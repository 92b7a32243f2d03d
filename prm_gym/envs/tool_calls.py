"""Running an agent's tool calls: the tool looked up, its arguments checked, the call made (in a
thread with a deadline when asked, or when the tool is async), typed failures turned into a
result the agent reads, the output capped. :class:`prm_gym.envs.base.ToolEnv` calls
:func:`call_tool` for each call of a turn.

A tool's :class:`~prm_gym.core.errors.ToolError` is the agent's mistake (it sees the message);
an :class:`~prm_gym.core.errors.InfraError` (or a missed deadline) is an outside failure and
marks the result ``infra_error``; any other exception is reported to the agent as a failure.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prm_gym.core.errors import InfraError, ToolError
from prm_gym.core.parsing import ToolCall
from prm_gym.core.tools import Tool, ToolResult


def cap_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with the cut marked."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... truncated {len(text) - limit} characters]"


def call_tool(
    tools: Mapping[str, Tool],
    call: ToolCall,
    max_output_chars: int,
    invoke: Callable[[Tool, dict[str, Any]], Any],
) -> ToolResult:
    """One call's result; ``invoke(tool, arguments)`` makes the call (:func:`invoke_tool`, or an
    env's override of it)."""
    resolved = resolve_call(tools, call)
    if isinstance(resolved, str):
        return ToolResult(call.name, False, resolved)
    tool, arguments = resolved
    start = time.perf_counter()
    try:
        ok, text, infra = True, str(invoke(tool, arguments)), False
    except ToolError as exc:
        ok, text, infra = False, f"Error: {exc}", False
    except InfraError as exc:
        ok, text, infra = False, f"Tool {call.name!r} is unavailable (infrastructure error): {exc}", True
    except Exception as exc:
        ok, text, infra = False, f"Tool {call.name!r} failed: {type(exc).__name__}: {exc}", False
    latency = time.perf_counter() - start
    return ToolResult(call.name, ok, cap_text(text, max_output_chars), latency, infra)


def resolve_call(tools: Mapping[str, Tool], call: ToolCall) -> tuple[Tool, dict[str, Any]] | str:
    """``(tool, arguments)`` that :func:`call_tool` would invoke for ``call``, or the message the agent
    reads when the tool is unknown or the arguments do not fit its schema."""
    tool = tools.get(call.name)
    if tool is None:
        return f"Unknown tool {call.name!r}; available tools: {sorted(tools)}."
    arguments = tool.typed_arguments(call.arguments) if call.text_arguments else call.arguments
    return tool.check_arguments(arguments) or (tool, arguments)


def invoke_tool(tool: Tool, arguments: dict[str, Any], timeout_s: float | None) -> Any:
    """Call ``tool``: directly, or in a daemon thread when it is async or has a deadline; a call
    past ``timeout_s`` is abandoned and raises :class:`InfraError`."""
    if timeout_s is None and not inspect.iscoroutinefunction(tool.fn):
        return tool.fn(**arguments)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            out = tool.fn(**arguments)
            box["value"] = asyncio.run(_await(out)) if inspect.isawaitable(out) else out
        except BaseException as exc:  # re-raised in the env's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"tool-{tool.name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise InfraError(f"no result within {timeout_s}s; the call was abandoned")
    if "error" in box:
        raise box["error"]
    return box.get("value")


NO_CALLS: dict[str, Any] = {"calls": 0, "failed": 0, "ok": True, "name": "", "latency_s": 0.0}


def tool_info(results: Sequence[ToolResult]) -> dict[str, Any]:
    """``info["tool"]``: how many calls this turn made and failed, their names and latency."""
    if not results:
        return NO_CALLS.copy()
    return {
        "calls": len(results),
        "failed": sum(not r.ok for r in results),
        "ok": all(r.ok for r in results),
        "name": ",".join(r.name for r in results),
        "latency_s": float(sum(r.latency_s for r in results)),
    }


async def _await(awaitable: Any) -> Any:
    return await awaitable
