"""What a request may carry: body size, body-read deadline, JSON shape, and client-set env kwargs.

Every malformed body answers 4xx, never 500: bytes that are not UTF-8 JSON, JSON nested deeper
than :data:`MAX_DEPTH` (the parser's own recursion limit included), integers longer than Python
parses (4300 digits), a body not sent in full within the body-read deadline (408; the connection
is closed). A request answered without its body read to the end (a 401, a 404, an endpoint that
takes no body) closes its connection too (:class:`CloseUnreadBodies`), so a client that declares a
body and never sends it holds no connection past its answer. Client-set
env kwargs are plain JSON within the bounds of :class:`KwargBounds`: a bigger value answers 400
with the bound, before any env is made.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prm_gym.envs.serve.errors import HTTPError

#: The deepest nesting a request body may have (arrays and objects).
MAX_DEPTH = 32
#: The largest integer a seed may be (NumPy seeds are 64-bit here).
MAX_SEED = 2**63 - 1


def depth(value: Any) -> int:
    """How deeply ``value`` nests (iterative: a deep value cannot overflow the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` as a JSON object; 400 (or 422 for a non-object) with the reason otherwise."""
    try:
        value = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except UnicodeDecodeError as exc:
        raise HTTPError(400, f"the body is not UTF-8 ({exc}); send UTF-8 JSON") from exc
    except json.JSONDecodeError as exc:
        raise HTTPError(400, f"the body is not JSON ({exc})") from exc
    except RecursionError:
        raise HTTPError(400, f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer longer than 4300 digits
        raise HTTPError(400, f"the body has a value JSON parsing refuses: {exc}") from exc
    if depth(value) > MAX_DEPTH:
        raise HTTPError(400, f"the body nests deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict):
        raise HTTPError(422, "the body must be a JSON object")
    return value


if TYPE_CHECKING:  # fastapi is the serve extra; this module imports without it
    from fastapi import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send


class CloseUnreadBodies:
    """ASGI middleware: ``Connection: close`` on a response sent before its request's body was
    received in full.

    Otherwise the connection would stay open after the answer, waiting for the rest of a body
    nobody reads: a client declaring ``Content-Length: 1000`` and sending one byte to an endpoint
    that answers without reading (401, 404, ``GET /tools``) held it until uvicorn's keep-alive
    timeout, and for ever if it sent a byte now and then. Bodies that are read have their own
    deadline (:func:`read_body`, 408).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        unread = headers.get(b"content-length", b"0").strip() not in (b"0", b"") or b"transfer-encoding" in headers

        async def receive_body() -> Message:
            nonlocal unread
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                unread = False  # the whole body arrived (or the client left)
            return message

        async def send_answer(message: Message) -> None:
            if message["type"] == "http.response.start" and unread:
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*kept, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive_body, send_answer)


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The request's body: 413 past ``limit`` bytes, 408 when not received within ``timeout_s``, 400
    when the client disconnects first (no traceback in the log)."""
    from starlette.requests import ClientDisconnect  # the serve extra, present wherever a request is

    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(413, f"request body of {declared} bytes exceeds the limit of {limit} (--max-body-bytes)")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HTTPError(413, f"request body exceeds the limit of {limit} bytes (--max-body-bytes)")
                chunks.append(chunk)
    except TimeoutError:
        raise HTTPError(408, f"the body did not arrive within {timeout_s:g}s (--body-timeout-s)") from None
    except ClientDisconnect:  # the client left mid-body: nobody to answer, nothing to log
        raise HTTPError(400, "the client disconnected before its body arrived") from None
    return b"".join(chunks)


@dataclass(frozen=True)
class KwargBounds:
    """Bounds on every value a client sets in ``env_kwargs``.

    Attributes:
        max_num_tasks: the most tasks a session may ask to generate (``num_tasks``).
        max_int: any other integer kwarg's bound in absolute value (seeds: up to 2**63 - 1).
        max_str_chars: the longest string.
        max_items: the longest list or object.
        max_depth: the deepest nesting of lists and objects.
    """

    max_num_tasks: int = 10_000
    max_int: int = 1_000_000
    max_str_chars: int = 256
    max_items: int = 64
    max_depth: int = 2

    def check(self, kwargs: dict[str, Any]) -> None:
        """400 naming the first kwarg that breaks a bound."""
        for key, value in kwargs.items():
            reason = self._reason(key, value)
            if reason:
                raise HTTPError(400, f"env_kwargs[{key!r}] {reason}")

    def _reason(self, key: str, value: Any) -> str | None:
        if depth(value) > self.max_depth:
            return f"nests deeper than {self.max_depth} levels"
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, bool) or item is None:
                continue
            if isinstance(item, int):
                cap = self.max_num_tasks if key == "num_tasks" else MAX_SEED if key.endswith("seed") else self.max_int
                if abs(item) > cap:
                    return f"= {str(item)[:40]} is beyond the bound {cap} (the server's limit on client-set values)"
            elif isinstance(item, float):
                if not math.isfinite(item) or abs(item) > self.max_int:
                    return f"= {item} is beyond the bound {self.max_int}"
            elif isinstance(item, str):
                if len(item) > self.max_str_chars:
                    return f"is a string of {len(item)} characters, longer than {self.max_str_chars}"
            elif isinstance(item, list | dict):
                if len(item) > self.max_items:
                    return f"has {len(item)} items, more than {self.max_items}"
                stack.extend(item.values() if isinstance(item, dict) else item)
        return None
