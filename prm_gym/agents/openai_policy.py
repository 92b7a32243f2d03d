"""OpenAIPolicy: any OpenAI-compatible chat server as a policy (vLLM, llama.cpp's server, Ollama,
a hosted provider), to play, export and evaluate envs with a model you already serve.

Policy id ``openai:<model>@<base_url>``, e.g. ``openai:Qwen/Qwen2.5-7B-Instruct@http://localhost:8000/v1``;
without ``@<base_url>`` the base URL is ``$OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``).
The API key is read from ``$OPENAI_API_KEY`` (none is sent when it is unset: local servers).

Each turn the conversation so far goes to ``POST <base_url>/chat/completions`` with the env's tool
schemas as ``tools=``. The reply becomes the env's action: its content (an ``<answer>`` passes
through as written) followed by each of its ``tool_calls`` rendered in the env's tool-call format
(hermes by default: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``). The env's
observation goes back as one ``tool`` message per call (each ``<tool_response>`` block to its call
id) or, when the reply made no structured calls, as a user message.

Every request has one total deadline (``timeout_s``, default 120 s) covering connecting, reading,
every retry and its backoff; a connect error, a timeout, a 429 or a 5xx is retried up to
``max_retries`` times with exponential backoff from ``backoff_s``. A call that still fails raises
:class:`prm_gym.agents.vllm.PolicyServerError`, which stops the run: a policy that cannot answer
is not the agent's wrong answer. Nothing here can train: training needs the token ids the policy
sampled and their log-probs, which a chat API does not return; :meth:`OpenAIPolicy.generate`
says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from prm_gym.agents.vllm import PolicyServerError
from prm_gym.core.errors import ConfigError
from prm_gym.core.http_retry import post_json
from prm_gym.core.models import tiny_tokenizer
from prm_gym.core.policy import ChatReply, Generation, SamplingParams
from prm_gym.core.tool_formats import format_call
from prm_gym.rewards.protocol import run_sync

#: The policy-id prefix of a chat-server policy (``openai:<model>[@<base_url>]``).
PREFIX = "openai:"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_ENV, URL_ENV = "OPENAI_API_KEY", "OPENAI_BASE_URL"
_RESPONSE_RE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
NOT_TRAINABLE = (
    "an openai: policy can play (prm-play), export (prm-export) and evaluate (train-agent --mode eval), "
    "but not train: training needs the token ids the policy sampled and their log-probs, which a chat API "
    "does not return. Train hf:<model> (or vllm:<url> with --vllm-weights) instead."
)


def parse_policy_id(policy_id: str, environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """``(model, base_url)`` of ``openai:<model>[@<base_url>]``.

    Raises:
        ConfigError: no model name, or a base URL that is not http(s).
    """
    if not policy_id.startswith(PREFIX):
        raise ConfigError(f"policy id {policy_id!r} must look like openai:<model>@<base_url>.")
    model, at, url = policy_id[len(PREFIX) :].rpartition("@")
    if not at or not url.startswith(("http://", "https://")):
        model, url = policy_id[len(PREFIX) :], environ.get(URL_ENV) or DEFAULT_BASE_URL
    if not model or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ConfigError(
            f"policy id {policy_id!r}: give a model and an http(s) base URL, e.g. "
            "openai:Qwen/Qwen2.5-7B-Instruct@http://localhost:8000/v1"
        )
    return model, url.rstrip("/")


def render_action(message: Mapping[str, Any], tool_format: str) -> str:
    """The env action for an assistant message: its content, then its ``tool_calls`` written in
    ``tool_format``. Arguments that are not a JSON object stay as the model wrote them, in a
    hermes-style block the env scores as the agent's malformed call."""
    parts = [str(message.get("content") or "").strip()]
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        name, raw = str(fn.get("name", "")), fn.get("arguments", "{}")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            args = None
        if isinstance(args, dict):
            parts.append(format_call(name, args, tool_format))
        else:
            parts.append(f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {raw}}}</tool_call>')
    return "\n".join(p for p in parts if p)


@dataclass
class Usage:
    """Running totals of the policy's requests (retries included) and tokens."""

    requests: int = 0
    retries: int = 0
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class OpenAIPolicy:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint, as a
    :class:`prm_gym.core.policy.ChatPolicy`.

    Args:
        model: the served model's name (``model`` in each request).
        base_url: the API root, ending in ``/v1`` for most servers.
        api_key: sent as a bearer token (None: no ``Authorization`` header).
        timeout_s: one total deadline per reply: connect, reads, retries and backoff.
        max_retries: retries after a connect error, timeout, 429 or 5xx.
        backoff_s: the first retry's delay, doubled for each further one.
        concurrency: requests in flight at once (a batch of episodes plays concurrently).
    """

    version = 0

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        concurrency: int = 8,
    ):
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or concurrency < 1:
            raise ConfigError("OpenAIPolicy: timeout_s > 0, max_retries >= 0, backoff_s >= 0, concurrency >= 1.")
        self.model, self.base_url, self.api_key = model, base_url.rstrip("/"), api_key
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.concurrency = concurrency
        self.usage = Usage()
        # Only so that code building a ChatTemplate from ``policy.tokenizer`` (play, export, eval)
        # gets its system prompt and tool format; no ids are ever sent to the server.
        self.tokenizer = tiny_tokenizer()

    @classmethod
    def from_id(
        cls, policy_id: str, environ: Mapping[str, str] = os.environ, seed: int = 0, **kwargs: Any
    ) -> OpenAIPolicy:
        """The policy for ``openai:<model>[@<base_url>]``, the key from ``$OPENAI_API_KEY`` (``seed`` is
        unused: the server samples with its own randomness)."""
        model, url = parse_policy_id(policy_id, environ)
        return cls(model, url, api_key=environ.get(KEY_ENV) or None, **kwargs)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Not possible: raises the error that explains why (see :data:`NOT_TRAINABLE`)."""
        raise ConfigError(NOT_TRAINABLE)

    def chat(
        self,
        conversations: Sequence[list[dict[str, Any]]],
        tools: Sequence[Sequence[dict[str, Any]]],
        params: SamplingParams,
        tool_format: str = "hermes",
    ) -> list[ChatReply]:
        """One reply per conversation, all requests in flight together (up to ``concurrency``)."""
        return run_sync(self.achat(conversations, tools, params, tool_format))

    async def achat(
        self,
        conversations: Sequence[list[dict[str, Any]]],
        tools: Sequence[Sequence[dict[str, Any]]],
        params: SamplingParams,
        tool_format: str = "hermes",
    ) -> list[ChatReply]:
        """:meth:`chat` for async callers."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        gate = asyncio.Semaphore(self.concurrency)
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=headers, limits=limits, timeout=self.timeout_s
        ) as client:
            pairs = zip(conversations, tools, strict=True)
            jobs = [self._one(client, gate, c, t, params, tool_format) for c, t in pairs]
            return list(await asyncio.gather(*jobs))

    async def _one(
        self,
        client: httpx.AsyncClient,
        gate: asyncio.Semaphore,
        messages: list[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        params: SamplingParams,
        tool_format: str,
    ) -> ChatReply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
        }
        if tools:
            body["tools"] = list(tools)
        async with gate:
            try:
                data = await asyncio.wait_for(self._post(client, body), self.timeout_s)
            except TimeoutError:
                raise PolicyServerError(
                    f"{self.base_url} gave no reply within the {self.timeout_s}s deadline (connect, reads and retries)"
                ) from None
        try:
            choice = data["choices"][0]
            message = dict(choice["message"])
        except (KeyError, IndexError, TypeError) as exc:
            raise PolicyServerError(f"{self.base_url}: malformed chat completion: {str(data)[:200]}") from exc
        usage = data.get("usage") or {}
        self.usage.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.usage.completion_tokens += int(usage.get("completion_tokens") or 0)
        message["role"] = "assistant"
        if message.get("tool_calls") and not all(c.get("id") for c in message["tool_calls"]):
            # calls without ids cannot be answered by tool messages: keep the turn as the text the env saw
            message = {"role": "assistant", "content": render_action(message, tool_format)}
        text = render_action(choice["message"], tool_format)
        return ChatReply(text, message, str(choice.get("finish_reason") or "stop"))

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
        return await post_json(
            client,
            "/chat/completions",
            body,
            where=self.base_url,
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
            counts=self.usage,
            fail=lambda message: PolicyServerError(f"openai policy {self.model!r}: {message}"),
        )

    def followup(self, reply: ChatReply, observation: str) -> list[dict[str, Any]]:
        """The observation as one ``tool`` message per structured call (each ``<tool_response>``
        block to its call, in order, when the counts match; else the whole observation to the first
        call and an empty result to the rest), or as a user message when the reply made none."""
        calls = list(reply.message.get("tool_calls") or [])
        if not calls:
            return [{"role": "user", "content": observation}]
        blocks = _RESPONSE_RE.findall(observation)
        if len(blocks) != len(calls):
            blocks = [observation] + [""] * (len(calls) - 1)
        return [{"role": "tool", "tool_call_id": c["id"], "content": b} for c, b in zip(calls, blocks, strict=True)]
