"""The env server's HTTP API (FastAPI), and a way to run it in a thread.

Every body is JSON in the wire format of :mod:`prm_gym.envs.serve.wire`; every error is
``{"error": "<reason>"}``, 4xx when the request was wrong, 5xx when the env failed. With a token
(:mod:`prm_gym.envs.serve.auth`) every endpoint but ``/health`` needs ``Authorization: Bearer
<token>`` (401 otherwise), and a session answers only the client that created it; FastAPI's own
``/openapi.json``, ``/docs`` and ``/redoc`` are served only by a server without a token (loopback).
A response sent before its request's body arrived in full closes the connection
(:class:`~prm_gym.envs.serve.limits.CloseUnreadBodies`). Endpoints:

* ``GET /health`` -> ``{"status": "ok", "env", "sessions", "max_sessions"}``;
* ``GET /tools`` -> ``{"tools": [<OpenAI function schema>, ...]}``;
* ``POST /sessions`` ``{"env_kwargs": {...}}`` -> 201 ``{"session_id", "env", "tools", "judge",
  "reward_terms", "reward_kinds", "max_action_chars", "max_observation_chars"}``: a new env, made with the
  server's ``--env-kwargs`` updated by the request's, whose keys must be in ``--allow-kwargs``;
* ``POST /sessions/{id}/reset`` ``{"seed": int | null, "options": {"task_id": str}}`` ->
  ``{"observation", "info"}``;
* ``POST /sessions/{id}/step`` ``{"action": str}`` -> ``{"observation", "reward", "terminated",
  "truncated", "info"}``;
* ``GET /sessions/{id}/tasks`` -> ``{"tasks": [{"id", "meta": {"level", "env"}}]}`` (never the
  prompts, answers or gold data);
* ``POST /sessions/{id}/fork`` -> 201, a new session at this one's turn boundary (Tree-GRPO);
* ``DELETE /sessions/{id}`` -> ``{"closed": true}``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from prm_gym.core.extras import missing_extra

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import Response
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ImportError as _exc:
    raise missing_extra(_exc, "serve", "the env server (prm-serve)") from None

from prm_gym.envs.serve import auth, listener
from prm_gym.envs.serve.errors import HTTPError
from prm_gym.envs.serve.limits import MAX_SEED, CloseUnreadBodies
from prm_gym.envs.serve.sessions import EnvServer
from prm_gym.envs.serve.wire import dumps


def json_response(payload: Any, status: int = 200) -> Response:
    """A JSON response in the wire format."""
    return Response(dumps(payload), status_code=status, media_type="application/json")


def _reset_args(body: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None]:
    seed, options = body.get("seed"), body.get("options")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise HTTPError(422, f"seed must be an integer in [0, 2**63 - 1] or null, got {str(seed)[:40]!r}")
    if options is not None and not isinstance(options, dict):
        raise HTTPError(422, f"options must be a JSON object or null, got {type(options).__name__}")
    return seed, options


def _action(body: dict[str, Any]) -> str:
    if "action" not in body:
        raise HTTPError(422, "the body needs an 'action' field: the assistant's text for the turn")
    action = body["action"]
    if not isinstance(action, str):
        raise HTTPError(422, f"action must be a string, got {type(action).__name__}")
    return action


def build_app(server: EnvServer) -> FastAPI:
    """The FastAPI app serving ``server``'s sessions.

    With a token the generated API description and its pages (``/openapi.json``, ``/docs``,
    ``/redoc``) are off, so that every endpoint but ``/health`` needs the token."""
    docs = server.cfg.token is None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        listener.install_accept_log_limit()
        async with server.lifespan(app):
            yield

    app = FastAPI(
        title=f"prm-serve {server.cfg.env_id}",
        lifespan=lifespan,
        openapi_url="/openapi.json" if docs else None,  # None also removes /docs and /redoc
    )
    app.add_middleware(CloseUnreadBodies)

    @app.exception_handler(HTTPError)
    async def _http_error(request: Request, exc: HTTPError) -> Response:
        return json_response({"error": exc.reason}, exc.status)  # 408/413: CloseUnreadBodies closes

    @app.exception_handler(StarletteHTTPException)
    async def _route_error(request: Request, exc: StarletteHTTPException) -> Response:
        return json_response({"error": f"{exc.detail}: {request.method} {request.url.path}"}, exc.status_code)

    @app.get("/health")
    async def health() -> Response:
        cfg = server.cfg
        return json_response(
            {"status": "ok", "env": cfg.env_id, "sessions": len(server.sessions), "max_sessions": cfg.max_sessions}
        )

    @app.get("/tools")
    async def tools(request: Request) -> Response:
        server.owner(request)
        return json_response({"tools": server.tools})

    @app.post("/sessions")
    async def create(request: Request) -> Response:
        owner = server.owner(request)
        kwargs = server.session_kwargs(await server.body(request))
        return json_response(await server.create(kwargs, owner), 201)

    @app.post("/sessions/{sid}/reset")
    async def reset(sid: str, request: Request) -> Response:
        s = server.get(sid, server.owner(request))
        obs, info = await server.call(s, "reset", _reset_args(await server.body(request)))
        return json_response({"observation": obs, "info": info})

    @app.post("/sessions/{sid}/step")
    async def step(sid: str, request: Request) -> Response:
        s = server.get(sid, server.owner(request))
        action = _action(await server.body(request))
        obs, reward, terminated, truncated, info = await server.call(s, "step", action)
        out = {"observation": obs, "reward": reward, "terminated": terminated, "truncated": truncated}
        return json_response({**out, "info": info})

    @app.get("/sessions/{sid}/tasks")
    async def tasks(sid: str, request: Request) -> Response:
        s = server.get(sid, server.owner(request))
        return json_response({"tasks": await server.call(s, "tasks")})

    @app.post("/sessions/{sid}/fork")
    async def fork(sid: str, request: Request) -> Response:
        s = server.get(sid, server.owner(request))
        return json_response(await server.fork(s), 201)

    @app.delete("/sessions/{sid}")
    async def close(sid: str, request: Request) -> Response:
        s = server.get(sid, server.owner(request))
        if s.lock.locked():  # a call is running (maybe hung): end its worker now, not at its deadline
            await server.kill(s)
        async with s.lock:
            await server.close_session(s)
        return json_response({"closed": True})

    return app


@contextlib.contextmanager
def serve_in_thread(server: EnvServer, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run ``server`` under uvicorn in a daemon thread; yields its base URL and stops it on exit
    (which closes every session's env)."""
    auth.check_bind(host, server.cfg.token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    userver = listener.server(build_app(server), server.cfg, lifespan="on")
    thread = threading.Thread(target=userver.run, kwargs={"sockets": [sock]}, name="prm-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not userver.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("prm-serve: the server did not start")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        userver.should_exit = True
        thread.join(30)
        sock.close()
