"""VLLMPolicy: sampling from vLLM's OpenAI-compatible servers, token ids in and token ids out.

Every turn is one ``POST /v1/completions`` whose ``prompt`` is the episode's token ids (never
text), with ``logprobs`` and ``return_tokens_as_token_ids`` so the reply carries the exact
sampled ids (``"token_id:<id>"``) and their log-probs: nothing is re-tokenised. Requests of a
batch are sent concurrently (httpx, asyncio), bounded by ``max_in_flight``.

Several servers: a new episode goes to the least-busy server and later turns of the same
episode (prompts that extend an earlier prompt + reply) stay on it, so vLLM's prefix cache hits.

Weight updates after a learner step (:meth:`VLLMPolicy.load_lora` or
:meth:`VLLMPolicy.reload_weights`) wait for in-flight requests, update every server, then bump
``version``; a batch is therefore always served by exactly one version. For behaviour log-probs
that match the learner under temperature, start vLLM with ``--logprobs-mode processed_logprobs``
(see docs/scale-out.md); LoRA hot-loading needs ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import httpx

from prm_gym.core.errors import ConfigError, InfraError
from prm_gym.core.policy import Generation, SamplingParams


class PolicyServerError(InfraError):
    """A policy server failed, refused a request or answered something unusable."""


def _parse_token(token: str) -> int:
    if not token.startswith("token_id:"):
        raise PolicyServerError(
            f"the server returned token {token!r}, not 'token_id:<id>'; it must honour return_tokens_as_token_ids."
        )
    return int(token[len("token_id:") :])


class VLLMPolicy:
    """vLLM servers behind the :class:`prm_gym.core.policy.Policy` protocol.

    Args:
        base_urls: one URL or several, each ending in ``/v1`` (``http://host:8000/v1``).
        tokenizer: the tokenizer of the served model (decodes sampled ids into ``text``).
        model: the served base model name (``--served-model-name``); requests use the
            latest LoRA adapter instead once one is loaded.
        version: the served weights' version.
        max_in_flight: the most requests open at once across all servers.
        timeout_s: one total deadline a request, from connecting to the last byte of the answer
            (a server that drips its answer cannot hold a request longer).
        max_sessions: how many episode prefixes the sticky router remembers.
        seed: base of per-request seeds (``None``: the server's own randomness).
    """

    @classmethod
    def from_id(
        cls, policy_id: str, seed: int = 0, tokenizer: str = "hf:tiny", served_model: str = "policy"
    ) -> VLLMPolicy:
        """The client of ``vllm:<url>[,<url>...]``; ``tokenizer`` is the ``hf:`` id of the served weights."""
        from prm_gym.core.models import load_hf
        from prm_gym.core.policy_spec import PolicySpec

        _, tok = load_hf(tokenizer, seed)
        return cls(PolicySpec.parse(policy_id).urls, tok, model=served_model, seed=seed)

    def __init__(
        self,
        base_urls: str | Sequence[str],
        tokenizer: Any,
        model: str = "policy",
        *,
        version: int = 0,
        max_in_flight: int = 64,
        timeout_s: float = 300.0,
        max_sessions: int = 4096,
        seed: int | None = None,
    ):
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ConfigError("VLLMPolicy needs at least one base URL such as http://127.0.0.1:8000/v1.")
        self.base_urls = [u.rstrip("/") for u in urls]
        self.tokenizer = tokenizer
        self.model = model
        self.served = model
        self.version = version
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self.max_sessions = max_sessions
        self.seed = seed
        self.requests = 0
        self._sessions: OrderedDict[int, int] = OrderedDict()
        self._lengths: dict[int, int] = {}
        self._busy = [0] * len(self.base_urls)
        self._rr = 0
        self._cond = threading.Condition()
        self._readers = 0
        self._updating = False

    def reseed(self, seed: int) -> None:
        """Make the next requests' seeds a function of ``seed`` (per-request seeds count from it)."""
        self.seed, self.requests = seed % 2**31, 0

    # -- routing ---------------------------------------------------------------------------
    def route(self, prompt: Sequence[int]) -> int:
        """The server index for ``prompt``: the one its episode used so far, else the least busy."""
        with self._cond:
            for length in sorted((n for n in self._lengths if n <= len(prompt)), reverse=True):
                server = self._sessions.get(hash(tuple(prompt[:length])))
                if server is not None:
                    return server
            self._rr += 1
            n = len(self.base_urls)
            return min(range(n), key=lambda s: (self._busy[s], (s - self._rr) % n))

    def _remember(self, ids: list[int], server: int) -> None:
        with self._cond:
            key = hash(tuple(ids))
            self._sessions[key] = server
            self._sessions.move_to_end(key)
            self._lengths[len(ids)] = self._lengths.get(len(ids), 0) + 1
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
            if len(self._lengths) > self.max_sessions:
                self._lengths = dict(sorted(self._lengths.items(), key=lambda kv: -kv[1])[: self.max_sessions // 2])

    # -- sampling --------------------------------------------------------------------------
    def _body(self, prompt: Sequence[int], params: SamplingParams, index: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.served,
            "prompt": list(prompt),
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "stop": list(params.stop),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
        }
        if self.seed is not None:
            body["seed"] = self.seed + self.requests + index
        return body

    async def _one(
        self, client: httpx.AsyncClient, gate: asyncio.Semaphore, prompt: Sequence[int], params: SamplingParams, i: int
    ) -> Generation:
        server = self.route(prompt)
        async with gate:
            self._busy[server] += 1
            try:
                body = self._body(prompt, params, i)
                async with asyncio.timeout(self.timeout_s):
                    resp = await client.post(f"{self.base_urls[server]}/completions", json=body)
            except TimeoutError as exc:
                raise PolicyServerError(
                    f"policy server {self.base_urls[server]} did not answer within {self.timeout_s:g}s"
                ) from exc
            except httpx.HTTPError as exc:
                raise PolicyServerError(f"policy server {self.base_urls[server]} failed: {exc!r}") from exc
            finally:
                self._busy[server] -= 1
        if resp.status_code != 200:
            raise PolicyServerError(f"policy server {self.base_urls[server]} answered {resp.status_code}: {resp.text}")
        choice = resp.json()["choices"][0]
        lp = choice.get("logprobs") or {}
        ids = [_parse_token(t) for t in lp.get("tokens") or []]
        logprobs = [float(x) for x in lp.get("token_logprobs") or []]
        if len(ids) != len(logprobs):
            raise PolicyServerError("the server returned a different number of tokens and log-probs.")
        self._remember([*prompt, *ids], server)
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return Generation(ids, logprobs, self.tokenizer.decode(ids, skip_special_tokens=True), finish)

    async def agenerate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Sample one turn for every prompt, all requests in flight together."""
        gate = asyncio.Semaphore(self.max_in_flight)
        limits = httpx.Limits(max_connections=self.max_in_flight, max_keepalive_connections=self.max_in_flight)
        async with httpx.AsyncClient(timeout=self.timeout_s, limits=limits) as client:
            out = await asyncio.gather(*(self._one(client, gate, p, params, i) for i, p in enumerate(prompts)))
        self.requests += len(prompts)
        return list(out)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Blocking :meth:`agenerate`; waits while a weight update is under way."""
        if not prompts:
            return []
        with self._cond:
            self._cond.wait_for(lambda: not self._updating)
            self._readers += 1
        try:
            return asyncio.run(self.agenerate(prompts, params))
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    # -- weight updates --------------------------------------------------------------------
    def _root(self, url: str) -> str:
        return url[: -len("/v1")] if url.endswith("/v1") else url

    def _update(self, calls: list[tuple[str, dict[str, Any]]], version: int | None) -> int:
        with self._cond:
            self._cond.wait_for(lambda: not self._updating)
            self._updating = True
            self._cond.wait_for(lambda: self._readers == 0)
        try:
            with httpx.Client(timeout=self.timeout_s) as client:
                for url in self.base_urls:
                    for path, body in calls:
                        resp = client.post(self._root(url) + path, json=body)
                        if resp.status_code != 200:
                            raise PolicyServerError(f"{url}{path} answered {resp.status_code}: {resp.text}")
            self.version = self.version + 1 if version is None else version
            return self.version
        finally:
            with self._cond:
                self._updating = False
                self._cond.notify_all()

    def load_lora(self, path: str, version: int | None = None, unload_previous: bool = True) -> int:
        """Hot-load the LoRA adapter saved at ``path`` on every server and sample from it next.

        Uses vLLM's ``/v1/load_lora_adapter`` (and ``/v1/unload_lora_adapter`` for the previous
        adapter). Returns the new version (``version``, or the old one + 1).
        """
        new = self.version + 1 if version is None else version
        name = f"{self.model}-v{new}"
        calls = [("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})]
        if unload_previous and self.served != self.model:
            calls.append(("/v1/unload_lora_adapter", {"lora_name": self.served}))
        out = self._update(calls, new)
        self.served = name
        return out

    def reload_weights(self, version: int | None = None, rpc_path: str = "/collective_rpc") -> int:
        """Reload the full weights on every server (vLLM's ``reload_weights`` worker call).

        The learner first writes its weights where the server loads from (the served model
        directory); the server must run with ``VLLM_SERVER_DEV_MODE=1`` for ``/collective_rpc``.
        The prefix cache is reset afterwards (``/reset_prefix_cache``): vLLM keeps cached KV
        blocks across a reload, and a prompt seen before would otherwise reuse keys and values
        computed with the old weights.
        """
        calls = [(rpc_path, {"method": "reload_weights"}), ("/reset_prefix_cache", {})]
        out = self._update(calls, version)
        self.served = self.model
        return out
