"""HTTP client backend: queries a retrieval server (``python -m prm_gym.envs.search_index.server``).

Requests use the Search-R1 retriever shape, ``POST /retrieve`` with
``{"queries": [...], "topk": k, "return_scores": true}``. A server that is down, slow, or
answers with garbage raises :class:`prm_gym.core.errors.RetrievalError` (the env then flags the turn
``infra_error``); a 4xx answer about the query itself raises :class:`prm_gym.core.errors.ToolError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from prm_gym.core.errors import RetrievalError, ToolError
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


class HTTPRetriever:
    """A :class:`Retriever` that forwards batches of queries to a retrieval server.

    Args:
        url: the server's base URL (``http://127.0.0.1:8000``) or its ``/retrieve`` endpoint.
        timeout_s: per-request bound; past it the call raises ``RetrievalError``.
    """

    name = "http"

    def __init__(self, url: str, timeout_s: float = 10.0):
        base = url.rstrip("/")
        self.url = base if base.endswith("/retrieve") else base + "/retrieve"
        self.timeout_s = timeout_s
        self._client = httpx.Client(timeout=timeout_s, trust_env=False)

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        qs = [check_query(q, k) for q in queries]
        try:
            resp = self._client.post(self.url, json={"queries": qs, "topk": k, "return_scores": True})
        except httpx.TimeoutException:
            raise RetrievalError(f"retrieval server {self.url} did not answer within {self.timeout_s}s") from None
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
        self._client.close()
