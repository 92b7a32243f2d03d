"""One POST to an OpenAI-compatible server, retried with exponential backoff (httpx).

Shared by the LLM judges (:mod:`prm_gym.rewards.llm_judge`) and the chat-server policy
(:mod:`prm_gym.agents.openai_policy`). Retried: a connect or read failure, a per-request timeout,
and the statuses in :data:`RETRY_STATUS` (429 and 5xx among them); any other non-200 status fails
at once. The caller wraps the whole call in its one total deadline (``asyncio.wait_for``), which
therefore covers connecting, reading, every retry and every backoff.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

import httpx

#: Statuses worth another attempt: timeouts, conflicts, rate limits and server errors.
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class Counts(Protocol):
    """Where the attempts are counted (a judge's or a policy's usage totals)."""

    requests: int
    retries: int
    latency_s: float


async def post_json(
    client: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    *,
    where: str,
    max_retries: int,
    backoff_s: float,
    counts: Counts,
    fail: Callable[[str], Exception],
) -> dict[str, Any]:
    """POST ``body`` to ``path`` with up to ``max_retries`` retries (the first after ``backoff_s``,
    doubling); the response's JSON object.

    Raises:
        Exception: ``fail(message)`` when the server answers with a status not worth retrying or
            with something that is not a JSON object, or every attempt failed.
    """
    problem = ""
    for attempt in range(max_retries + 1):
        if attempt:
            counts.retries += 1
            await asyncio.sleep(backoff_s * 2 ** (attempt - 1))
        counts.requests += 1
        start = time.perf_counter()
        try:
            resp = await client.post(path, json=body)
        except httpx.TimeoutException:
            problem = "timed out"
            continue
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            continue
        finally:
            counts.latency_s += time.perf_counter() - start
        if resp.status_code in RETRY_STATUS:
            problem = f"HTTP {resp.status_code}: {resp.text[:200]}"
            continue
        if resp.status_code != 200:
            raise fail(f"HTTP {resp.status_code} from {where}: {resp.text[:200]}")
        try:
            data = resp.json()
        except ValueError as exc:
            raise fail(f"response is not JSON: {resp.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise fail(f"response is not a JSON object: {resp.text[:200]!r}")
        return data
    raise fail(f"{where} failed after {max_retries + 1} attempts: {problem}")
