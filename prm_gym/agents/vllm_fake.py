"""Fakes of vLLM: its OpenAI-compatible server (for :class:`prm_gym.agents.vllm.VLLMPolicy`) and its
``LLM`` engine (:class:`FakeLLM`, for :class:`prm_gym.agents.vllm_engine.VLLMEnginePolicy`).

:class:`FakeVLLMServer` answers, on an ephemeral 127.0.0.1 port from a background thread:

* ``POST /v1/completions`` with a token-id ``prompt``, ``logprobs`` and
  ``return_tokens_as_token_ids`` (tokens come back as ``"token_id:<id>"``, as vLLM writes them);
* ``POST /v1/load_lora_adapter`` / ``POST /v1/unload_lora_adapter`` (vLLM's runtime LoRA API);
* ``POST /collective_rpc`` with ``{"method": "reload_weights"}`` (a full-weight reload) and
  ``POST /reset_prefix_cache``;
* ``GET /v1/models`` (the base model and every loaded adapter).

Sampled ids come from ``reply(prompt_ids, request)``; their log-probs encode the served weights'
version (``-(1 + reloads)/100`` for the base model, ``-(1 + adapter index)/10`` for an adapter),
so a test can tell which weights served a request. Every request is recorded::

    with FakeVLLMServer(reply=lambda ids, req: [5, 6, 7]) as server:
        policy = VLLMPolicy(server.base_url, tokenizer)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from prm_gym.rewards.openai_fake import LocalHTTPServer

Reply = Callable[[list[int], dict[str, Any]], list[int]]


def echo_tail(prompt: list[int], request: dict[str, Any]) -> list[int]:
    """Reply with the prompt's last three ids (a deterministic default)."""
    return list(prompt[-3:])


class FakeVLLMServer(LocalHTTPServer):
    """A scriptable vLLM-compatible completions server in a background thread.

    Args:
        reply: ``(prompt_ids, request) -> sampled ids`` (cut at ``max_tokens``).
        model: the base model id listed by ``/v1/models``.
        delay_s: seconds to sleep before every completion (concurrency tests).
        name: a label recorded with each request (to tell servers apart).
    """

    def __init__(self, reply: Reply = echo_tail, model: str = "base", delay_s: float = 0.0, name: str = ""):
        self.reply = reply
        self.model = model
        self.name = name
        self.adapters: dict[str, str] = {}
        self.adapter_order: list[str] = []
        self.reloads = 0
        self.admin: list[tuple[str, dict[str, Any]]] = []
        super().__init__(_make_handler(self), "fake-vllm", delay_s)

    def fail_next(self, n: int = 1, status: int = 500) -> None:
        """Answer the next ``n`` completions with ``status``."""
        self.failures.extend([status] * n)

    def _logprob(self, model: str) -> float | None:
        if model == self.model:
            return -(1 + self.reloads) / 100
        if model in self.adapters:
            return -(1 + self.adapter_order.index(model)) / 10
        return None

    def complete(self, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and body for one completion request."""
        with self._serving(req) as failure:
            pass  # in flight while the delay runs, as a slow server would be
        if failure is not None:
            return failure, {"error": {"message": "scripted failure"}}
        prompt, model = req.get("prompt"), str(req.get("model", ""))
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            return 400, {"error": {"message": "prompt must be a list of token ids"}}
        lp = self._logprob(model)
        if lp is None:
            return 404, {"error": {"message": f"The model `{model}` does not exist."}}
        ids = list(self.reply(prompt, req))
        limit = int(req.get("max_tokens", 16))
        finish = "length" if len(ids) >= limit else "stop"
        ids = ids[:limit]
        as_ids = bool(req.get("return_tokens_as_token_ids"))
        tokens = [f"token_id:{t}" if as_ids else str(t) for t in ids]
        logprobs = {"tokens": tokens, "token_logprobs": [lp] * len(ids), "top_logprobs": None, "text_offset": []}
        choice = {"index": 0, "text": "", "finish_reason": finish, "logprobs": logprobs if "logprobs" in req else None}
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)}
        return 200, {"id": f"cmpl-{len(self.requests)}", "object": "text_completion", "model": model,
                     "choices": [choice], "usage": usage}  # fmt: skip

    def administer(self, path: str, req: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        """LoRA load/unload and full reloads."""
        with self._lock:
            self.admin.append((path, req))
            if path == "/v1/load_lora_adapter":
                name = str(req.get("lora_name", ""))
                if not name or not req.get("lora_path"):
                    return 400, {"error": {"message": "lora_name and lora_path are required"}}
                if name in self.adapters:
                    return 400, {"error": {"message": f"The lora adapter '{name}' has already been loaded."}}
                self.adapters[name] = str(req["lora_path"])
                self.adapter_order.append(name)
                return 200, f"Success: LoRA adapter '{name}' added successfully."
            if path == "/v1/unload_lora_adapter":
                name = str(req.get("lora_name", ""))
                if self.adapters.pop(name, None) is None:
                    return 404, {"error": {"message": f"The lora adapter '{name}' cannot be found."}}
                return 200, f"Success: LoRA adapter '{name}' removed successfully."
            if path == "/collective_rpc" and req.get("method") == "reload_weights":
                self.reloads += 1
                return 200, {"results": [None]}
            if path == "/reset_prefix_cache":
                return 200, {"success": True}
        return 404, {"error": {"message": "not found"}}


def _make_handler(server: FakeVLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, body: dict[str, Any] | str) -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                self._send(404, {"error": {"message": "not found"}})
                return
            ids = [server.model, *server.adapters]
            self._send(200, {"object": "list", "data": [{"id": i, "object": "model", "root": i} for i in ids]})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                req = json.loads(raw)
            except json.JSONDecodeError:
                self._send(400, {"error": {"message": "body is not JSON"}})
                return
            path = self.path.rstrip("/")
            if path == "/v1/completions":
                self._send(*server.complete(req))
            else:
                self._send(*server.administer(path, req))

    return Handler


class FakeLLM:
    """A stand-in for ``vllm.LLM`` (for :class:`prm_gym.agents.vllm_engine.VLLMEnginePolicy` tests).

    ``generate`` takes ``{"prompt_token_ids": [...]}`` prompts and per-prompt sampling params
    (anything with ``max_tokens``/``logprobs`` keys or attributes) and answers vLLM-shaped outputs:
    ``out.outputs[0].token_ids``, ``.logprobs`` (one ``{id: Logprob}`` per sampled id) and
    ``.finish_reason``. The log-prob of every sampled id is ``-(1 + loads)/100``, so a test can
    tell which weights sampled. ``collective_rpc("reload_weights", kwargs={"weights_iterator":
    pairs})`` records the pairs and bumps ``loads``; ``reset_prefix_cache`` is counted.

    Args:
        reply: ``(prompt_ids, params) -> sampled ids`` (cut at ``max_tokens``).
    """

    def __init__(self, reply: Callable[[list[int], Any], list[int]] = lambda p, sp: list(p[-3:])):
        self.reply = reply
        self.loads = 0
        self.loaded: list[list[tuple[str, Any]]] = []
        self.calls: list[str] = []
        self.params: list[Any] = []

    def generate(self, prompts: list[dict[str, Any]], params: list[Any], use_tqdm: bool = True) -> list[Any]:
        from types import SimpleNamespace

        self.calls.append("generate")
        out = []
        for prompt, sp in zip(prompts, params, strict=True):
            self.params.append(sp)
            limit = int(_field(sp, "max_tokens"))
            ids = list(self.reply(list(prompt["prompt_token_ids"]), sp))
            finish = "length" if len(ids) >= limit else "stop"
            ids = ids[:limit]
            lp = -(1 + self.loads) / 100
            logprobs = [{t: SimpleNamespace(logprob=lp, rank=1)} for t in ids] if _field(sp, "logprobs") == 0 else None
            choice = SimpleNamespace(token_ids=ids, logprobs=logprobs, finish_reason=finish)
            out.append(SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=[choice]))
        return out

    def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = (),
                       kwargs: dict[str, Any] | None = None) -> list[Any]:  # fmt: skip
        self.calls.append(method)
        if method != "reload_weights":
            raise NotImplementedError(method)
        self.loaded.append(list((kwargs or {})["weights_iterator"]))
        self.loads += 1
        return [None]

    def reset_prefix_cache(self) -> bool:
        self.calls.append("reset_prefix_cache")
        return True


def _field(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)
