"""Running an agent's tool calls: the tool looked up, its arguments checked, the call made (in a
thread with a deadline when asked, or when the tool is async), typed failures turned into a
result the agent reads, the output capped. :class:`prm_gym.envs.base.ToolEnv` calls
:func:`call_tool` for each call of a turn.

A tool's :class:`~prm_gym.core.errors.ToolError` is the agent's mistake (it sees the message);
an :class:`~prm_gym.core.errors.InfraError` raised by the tool is an outside failure and marks the
result ``infra_error``; any other exception is reported to the agent as a failure. A call past the
env's deadline (``tool_timeout_s``) is the agent's failed call too: the agent chose the arguments,
and a deadline miss it could turn into ``infra_error`` would let it hide a failure from the group
(docs/contract.md). A tool that waits on an outside service gives its client its own deadline and
raises ``InfraError`` when that passes.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import weakref
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
    """Call ``tool``: directly, or in a daemon thread when it is async or has a deadline. A call past
    ``timeout_s`` raises :class:`ToolError` (the agent's failed call); an async tool is cancelled at
    the deadline and its thread ends, a plain function cannot be stopped and is abandoned, its thread
    left running (:func:`abandoned_calls` counts them)."""
    if timeout_s is None and not inspect.iscoroutinefunction(tool.fn):
        return tool.fn(**arguments)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            out = tool.fn(**arguments)
            if inspect.isawaitable(out):
                box["cancellable"] = True
                out = asyncio.run(_await(out, timeout_s))
            box["value"] = out
        except BaseException as exc:  # re-raised in the env's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"tool-{tool.name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive() and box.get("cancellable"):
        worker.join(_CANCEL_GRACE_S)  # cancelled at the deadline, it ends with the deadline's ToolError
    if worker.is_alive():
        with _ABANDONED_LOCK:
            _ABANDONED.add(worker)
        raise _missed(timeout_s)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _missed(timeout_s: float | None) -> ToolError:
    """The agent's failed call: no result within the deadline."""
    return ToolError(f"no result within {timeout_s}s; the call was stopped")


_CANCEL_GRACE_S = 0.2
"""How long the env waits for an async tool to finish its cancellation once its deadline passed."""
_ABANDONED: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_ABANDONED_LOCK = threading.Lock()  # envs in other threads add while one counts


def abandoned_calls() -> int:
    """Tool calls of this process past their deadline whose threads still run (plain functions, which
    no thread deadline can stop: give such a tool its own bound, as the calculator does)."""
    with _ABANDONED_LOCK:
        return sum(t.is_alive() for t in list(_ABANDONED))


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


async def _await(awaitable: Any, timeout_s: float | None) -> Any:
    """``awaitable``'s result; at the deadline it is cancelled and the call fails as :func:`_missed`
    (a ``TimeoutError`` of the tool's own stays the tool's)."""
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            return await awaitable
    except TimeoutError:
        if deadline.expired():
            raise _missed(timeout_s) from None
        raise
