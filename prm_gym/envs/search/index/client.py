"""HTTP client backend: queries a retrieval server (``python -m prm_gym.envs.search.index.server``).

Requests use the Search-R1 retriever shape, ``POST /retrieve`` with
``{"queries": [...], "topk": k, "return_scores": true}``. A server that is down, slow, or
answers with garbage raises :class:`prm_gym.core.errors.RetrievalError` (the env then flags the turn
``infra_error``); a 4xx answer about the query itself raises :class:`prm_gym.core.errors.ToolError`.

The client is the standard library's ``http.client`` on one kept-alive connection per thread
(TCP_NODELAY, request line, headers and body in one write): a search call costs a fraction of a
millisecond over localhost, about a third of what a general-purpose HTTP client spends on it.

Each call has one total deadline (``timeout_s``, default 2 s: a BM25 search over localhost takes
well under a millisecond) covering connecting, sending and
reading the whole answer, retry included: before every read the socket's timeout is set to what is
left of it, so a server that dribbles a byte at a time cannot hold a step past it (a per-read
timeout would restart with every byte), over ``http://`` and ``https://`` alike (the TLS socket's reads
are bounded the same way, and its handshake).
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import urlsplit

from prm_gym.core.errors import ConfigError, RetrievalError, ToolError
from prm_gym.envs.search.index.protocol import Passage, check_query, split_contents


def parse_hit(hit: Any) -> Passage:
    """A passage from one result entry: ``{"document": {...}, "score": s}`` or a bare document."""
    doc, score = (hit["document"], hit.get("score", 0.0)) if isinstance(hit, dict) and "document" in hit else (hit, 0.0)
    if not isinstance(doc, dict) or "id" not in doc:
        raise RetrievalError(f"retrieval server returned a malformed passage: {str(hit)[:200]}")
    if "text" in doc:
        title, text = str(doc.get("title", "")), str(doc["text"])
    else:
        title, text = split_contents(str(doc.get("contents", "")))
    return Passage(str(doc["id"]), title, text, float(score or 0.0))


#: Seconds one retrieval call may take in total (connect, send, read the whole answer).
DEFAULT_TIMEOUT_S = 2.0


def _left(deadline: float) -> float:
    """Seconds left until ``deadline`` (``time.monotonic``), or ``TimeoutError`` once it passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the call's deadline passed")
    return left


def _bound(sock: socket.socket, deadline: float) -> None:
    """Set ``sock``'s timeout to what is left until ``deadline``, or raise ``TimeoutError``."""
    sock.settimeout(min(_left(deadline), 1e9))


class _Bounded:
    """Every read and send of a socket class it is mixed into waits at most until ``deadline``
    (``time.monotonic``): ``http.client`` reads and writes through these two, plain or TLS."""

    deadline = math.inf

    def recv_into(self, *args: Any, **kwargs: Any) -> int:
        _bound(cast(socket.socket, self), self.deadline)
        return cast(int, super().recv_into(*args, **kwargs))  # type: ignore[misc]

    def sendall(self, *args: Any, **kwargs: Any) -> None:
        _bound(cast(socket.socket, self), self.deadline)
        super().sendall(*args, **kwargs)  # type: ignore[misc]


class _DeadlineSocket(_Bounded, socket.socket):
    """A plain socket bounded by :class:`_Bounded`."""


class _DeadlineTLSSocket(_Bounded, ssl.SSLSocket):
    """A TLS socket bounded by :class:`_Bounded` (the handshake is bounded before it starts)."""


class _DeadlineConnection(http.client.HTTPConnection):
    """An ``http.client`` connection whose every read and send waits at most until ``deadline``
    (TCP_NODELAY; over TLS with ``tls=True``, the handshake bounded too)."""

    deadline = math.inf

    def __init__(self, host: str, port: int | None, timeout: float, tls: bool = False):
        super().__init__(host, port if port is not None else (443 if tls else None), timeout=timeout)
        self._tls: ssl.SSLContext | None = None
        if tls:
            self._tls = ssl.create_default_context()
            self._tls.sslsocket_class = _DeadlineTLSSocket

    def connect(self) -> None:
        left = _left(self.deadline)
        raw = socket.create_connection((self.host, self.port), min(left, self.timeout or left))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            _bound(raw, self.deadline)  # the handshake
            tls = cast(_DeadlineTLSSocket, self._tls.wrap_socket(raw, server_hostname=self.host))
            tls.deadline = self.deadline
            self.sock = tls
            return
        sock = _DeadlineSocket(raw.family, raw.type, raw.proto, fileno=raw.detach())
        sock.deadline = self.deadline
        self.sock = sock

    def arm(self, deadline: float) -> None:
        """Bound this call (and a reconnect within it) by ``deadline``."""
        self.deadline = deadline
        if isinstance(self.sock, _Bounded):
            self.sock.deadline = deadline


class HTTPRetriever:
    """A :class:`Retriever` that forwards batches of queries to a retrieval server.

    Args:
        url: the server's base URL (``http://127.0.0.1:8000``) or its ``/retrieve`` endpoint.
        timeout_s: one total deadline per call (connect, send, read the whole answer, one retry of a
            dropped kept-alive connection); past it the call raises ``RetrievalError``.

    Raises:
        ConfigError: the URL is not ``http://`` or ``https://`` with a host.
    """

    name = "http"

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S):
        if not timeout_s > 0:
            raise ConfigError(f"HTTPRetriever timeout_s must be > 0, got {timeout_s!r}.")
        base = url.rstrip("/")
        self.url = base if base.endswith("/retrieve") else base + "/retrieve"
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"retrieval server URL {url!r} must look like http://host:port; fix the index= argument.")
        self.timeout_s = timeout_s
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._local = threading.local()
        self._open: list[_DeadlineConnection] = []
        self._lock = threading.Lock()

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        qs = [check_query(q, k) for q in queries]
        body = json.dumps({"queries": qs, "topk": k, "return_scores": True}).encode("utf-8")
        status, data = self._post(body)
        text = data.decode("utf-8", errors="replace")
        if 400 <= status < 500 and status not in (404, 408, 429):
            raise ToolError(f"the retrieval server rejected the query: {text[:300]}")
        if status != 200:
            raise RetrievalError(f"retrieval server {self.url} answered HTTP {status}: {text[:200]}")
        try:
            result = json.loads(data)["result"]
            if not isinstance(result, list) or len(result) != len(qs):
                raise ValueError(f"expected {len(qs)} result lists")
            return [[parse_hit(h) for h in hits] for hits in result]
        except (ValueError, KeyError, TypeError) as exc:
            raise RetrievalError(f"retrieval server {self.url} returned garbage ({exc})") from None

    def _connection(self) -> _DeadlineConnection:
        conn: _DeadlineConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _DeadlineConnection(self._host, self._port, self.timeout_s, tls=self._https)
            with self._lock:
                self._open.append(conn)
        return conn

    def _post(self, body: bytes) -> tuple[int, bytes]:
        """``(status, body)`` of one POST; a kept-alive connection the server dropped is retried once."""
        deadline = time.monotonic() + self.timeout_s
        for attempt in (0, 1):
            conn = self._connection()
            conn.arm(deadline)
            fresh = conn.sock is None
            try:
                conn.request("POST", self._path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self._failed(conn, exc, isinstance(exc, TimeoutError), fresh or bool(attempt))
                continue
            if resp.will_close:
                conn.close()
            return resp.status, data
        raise AssertionError("not reached: the second attempt returns or raises")  # pragma: no cover

    def _failed(self, conn: http.client.HTTPConnection, exc: BaseException, timed_out: bool, last: bool) -> None:
        """Close ``conn`` after ``exc``; raise :class:`RetrievalError` unless a retry may follow (a
        kept-alive connection the server dropped, on the first attempt, within the deadline)."""
        conn.close()
        if timed_out:
            raise RetrievalError(
                f"retrieval server {self.url} did not answer within the {self.timeout_s}s deadline"
            ) from None
        if last:
            raise RetrievalError(f"retrieval server {self.url} is unreachable ({type(exc).__name__}: {exc})") from None

    def close(self) -> None:
        """Close every thread's connection (a later call opens a new one)."""
        with self._lock:
            for conn in self._open:
                conn.close()
