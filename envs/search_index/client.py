"""HTTP client backend: queries a retrieval server (``python -m prm_gym.envs.search_index.server``).

Requests use the Search-R1 retriever shape, ``POST /retrieve`` with
``{"queries": [...], "topk": k, "return_scores": true}``. A server that is down, slow, or
answers with garbage raises :class:`prm_gym.core.errors.RetrievalError` (the env then flags the turn
``infra_error``); a 4xx answer about the query itself raises :class:`prm_gym.core.errors.ToolError`.

Each call has one total deadline (``timeout_s``, default 10 s) covering connecting, sending
and reading the whole answer: a server that dribbles a byte at a time cannot hold a step past
it (a per-read timeout would restart with every byte). Requests run on a private event-loop
thread, so the deadline can cancel them mid-read, and the client works from sync and async
callers alike.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import httpx

from prm_gym.core.errors import ConfigError, RetrievalError, ToolError
from prm_gym.envs.search_index.protocol import Passage, check_query, split_contents


def parse_hit(hit: Any) -> Passage:
    """A passage from one result entry: ``{"document": {...}, "score": s}`` or a bare document."""
    doc, score = (hit["document"], hit.get("score", 0.0)) if isinstance(hit, dict) and "document" in hit else (hit, 0.0)
    if not isinstance(doc, dict) or "id" not in doc:
        raise RetrievalError(f"retrieval server returned a malformed passage: {str(hit)[:200]}")
    if "text" in doc:
        title, text = str(doc.get("title", "")), str(doc["text"])
    else:
        title, text = split_contents(str(doc.get("contents", "")))
    return Passage(str(doc["id"]), title, text, float(score))


#: Seconds one retrieval call may take in total (connect, send, read the whole answer).
DEFAULT_TIMEOUT_S = 10.0
_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _http_loop() -> asyncio.AbstractEventLoop:
    """The event loop (on its own daemon thread) that runs every retriever's requests."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="prm-retriever-http", daemon=True).start()
            _loop = loop
        return _loop


class HTTPRetriever:
    """A :class:`Retriever` that forwards batches of queries to a retrieval server.

    Args:
        url: the server's base URL (``http://127.0.0.1:8000``) or its ``/retrieve`` endpoint.
        timeout_s: one total deadline per call (connect, send and read the whole answer);
            past it the call raises ``RetrievalError``.
    """

    name = "http"

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S):
        if not timeout_s > 0:
            raise ConfigError(f"HTTPRetriever timeout_s must be > 0, got {timeout_s!r}.")
        base = url.rstrip("/")
        self.url = base if base.endswith("/retrieve") else base + "/retrieve"
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None

    async def _apost(self, payload: dict[str, Any]) -> httpx.Response:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, trust_env=False)
        return await asyncio.wait_for(self._client.post(self.url, json=payload), self.timeout_s)

    def _post(self, payload: dict[str, Any]) -> httpx.Response:
        """POST ``payload`` under the total deadline (a backstop guards the loop thread too)."""
        future = asyncio.run_coroutine_threadsafe(self._apost(payload), _http_loop())
        try:
            return future.result(self.timeout_s + 5.0)
        except TimeoutError:
            future.cancel()
            raise

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        qs = [check_query(q, k) for q in queries]
        try:
            resp = self._post({"queries": qs, "topk": k, "return_scores": True})
        except (httpx.TimeoutException, TimeoutError):
            raise RetrievalError(
                f"retrieval server {self.url} did not answer within the {self.timeout_s}s deadline"
            ) from None
        except httpx.HTTPError as exc:
            raise RetrievalError(f"retrieval server {self.url} is unreachable ({type(exc).__name__}: {exc})") from None
        if 400 <= resp.status_code < 500 and resp.status_code not in (404, 408, 429):
            raise ToolError(f"the retrieval server rejected the query: {resp.text[:300]}")
        if resp.status_code != 200:
            raise RetrievalError(f"retrieval server {self.url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            result = resp.json()["result"]
            if not isinstance(result, list) or len(result) != len(qs):
                raise ValueError(f"expected {len(qs)} result lists")
            return [[parse_hit(h) for h in hits] for hits in result]
        except (ValueError, KeyError, TypeError) as exc:
            raise RetrievalError(f"retrieval server {self.url} returned garbage ({exc})") from None

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and _loop is not None and not _loop.is_closed():
            asyncio.run_coroutine_threadsafe(client.aclose(), _loop).result(5.0)
