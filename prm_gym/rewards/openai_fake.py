"""An in-process OpenAI-compatible chat server on 127.0.0.1, for tests of LLM judges and chat policies.

:class:`FakeOpenAIServer` answers ``POST /v1/chat/completions`` and ``GET /v1/models`` on an
ephemeral port from a background thread. Its replies are scripted by a function of the request's
messages; failures (HTTP status codes, dropped connections) and latency are scripted too, and
every request is recorded::

    with FakeOpenAIServer(reply=lambda messages: '{"score": 8, "reason": "fine"}') as server:
        judge = LLMJudge(base_url=server.base_url)
        ...
        assert server.requests[0]["model"] == "fake"
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Messages = list[dict[str, Any]]


def gullible(messages: Messages) -> str:
    """A deliberately gullible judge: full marks for anything (used to prove the guards work)."""
    return '{"score": 10, "reason": "looks correct"}'


@dataclass(frozen=True)
class Failure:
    """A scripted failure for one request.

    Attributes:
        status: the HTTP status to answer with (e.g. 500, 429); 0 drops the connection.
        body: the response body.
    """

    status: int = 500
    body: str = '{"error": {"message": "scripted failure"}}'


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # many clients connect at once; the default backlog of 5 resets them
    daemon_threads = True


class LocalHTTPServer:
    """An HTTP server on an ephemeral 127.0.0.1 port, served from a daemon thread.

    The shared lifecycle of the package's fake servers: ``start``/``close`` (idempotent) and the
    context manager, and the bookkeeping of the requests they answer (:meth:`_serving`: every
    request kept, scripted failures taken in order, requests in flight counted, ``delay_s``
    slept). Subclasses pass the handler class their requests go to.
    """

    def __init__(self, handler: type[BaseHTTPRequestHandler], thread_name: str, delay_s: float = 0.0):
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._thread: threading.Thread | None = None
        self._thread_name = thread_name
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self.failures: deque[Any] = deque()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The URL to give a client, ending in ``/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @contextmanager
    def _serving(self, request: dict[str, Any]) -> Iterator[Any]:
        """Record ``request`` and count it in flight while the body runs (after ``delay_s``);
        yields the next scripted failure, or ``None``."""
        with self._lock:
            self.requests.append(request)
            failure = self.failures.popleft() if self.failures else None
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            yield failure
        finally:
            with self._lock:
                self.in_flight -= 1

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever, name=self._thread_name, daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port; idempotent."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeOpenAIServer(LocalHTTPServer):
    """A scriptable OpenAI-compatible server in a background thread.

    Args:
        reply: ``messages -> content`` of the assistant reply, or ``messages -> message``: a dict
            such as ``{"content": None, "tool_calls": [...]}`` (a policy's structured tool calls);
            defaults to :func:`gullible`.
        delay_s: seconds to sleep before every answer (to test timeouts and concurrency).
        model: the model id listed by ``/v1/models``.
    """

    def __init__(
        self, reply: Callable[[Messages], str | dict[str, Any]] = gullible, delay_s: float = 0.0, model: str = "fake"
    ):
        self.reply = reply
        self.model = model
        self.headers: list[dict[str, str]] = []  # each chat request's HTTP headers (lower-case names)
        super().__init__(_make_handler(self), "fake-openai", delay_s)

    def fail_next(self, n: int = 1, status: int = 500, body: str | None = None) -> None:
        """Answer the next ``n`` chat requests with ``status`` (0 drops the connection)."""
        for _ in range(n):
            self.failures.append(Failure(status, body) if body is not None else Failure(status))

    def complete(self, request: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        """The status and body for one chat request (called by the handler thread)."""
        with self._serving(request) as failure:
            if failure is not None:
                return failure.status, failure.body
            messages = request.get("messages")
            if not isinstance(messages, list):
                return 400, '{"error": {"message": "messages must be a list"}}'
            reply = self.reply(messages)
        message = {"role": "assistant", **reply} if isinstance(reply, dict) else {"role": "assistant", "content": reply}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        completion_tokens = len(str(message.get("content") or "").split())
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", self.model),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out separately; don't wait for ACKs

        def log_message(self, format: str, *args: Any) -> None:  # silence stderr
            return

        def _send(self, status: int, body: dict[str, Any] | str) -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test); nothing to answer

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
            else:
                self._send(404, '{"error": {"message": "not found"}}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, '{"error": {"message": "not found"}}')
                return
            try:
                request = json.loads(raw)
            except json.JSONDecodeError:
                self._send(400, '{"error": {"message": "body is not JSON"}}')
                return
            server.headers.append({k.lower(): v for k, v in self.headers.items()})
            status, body = server.complete(request)
            if status == 0:
                self.close_connection = True
                self.connection.close()
                return
            self._send(status, body)

    return Handler
