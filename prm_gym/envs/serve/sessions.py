"""The env server's sessions: one env instance each, a lock each, an idle reaper.

:class:`EnvServer` holds the sessions of one registered env and does the work behind every
endpoint of :mod:`prm_gym.envs.serve.app`. A session's calls run one at a time (an
``asyncio.Lock`` each) and env calls run in a thread pool, so a slow step never blocks another
session. A session idle for ``idle_timeout_s`` is closed by a reaper that calls ``env.close()``
(sandboxes and databases released). An exception out of ``reset``/``step``, other than the
client's mistakes (an unknown task id: 400; stepping a finished episode: 409), answers 5xx with
the reason and closes the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import gymnasium as gym
from fastapi import FastAPI, Request

import prm_gym  # noqa: F401  (registers prm/ ids)
from prm_gym.core.errors import ConfigError, InfraError, TaskError

#: Session keyword arguments a client may set unless ``--allow-kwargs`` says otherwise: they pick
#: which generated tasks a session plays, or how its policy writes tool calls (``tool_format``),
#: never a file, a URL or a sandbox setting.
DEFAULT_ALLOWED_KWARGS = frozenset({"split", "levels", "num_tasks", "task_seed", "tool_format"})
#: Task metadata the ``tasks`` endpoint shows (gold data never leaves the server).
PUBLIC_META = ("level", "env")


class HTTPError(Exception):
    """Answered as ``{"error": reason}`` with ``status``."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class ServerConfig:
    """What one server serves.

    Attributes:
        env_id: the registered env every session plays.
        env_kwargs: keyword arguments for ``gym.make`` (a session may update the allowed ones).
        allow_kwargs: the keys a session's ``env_kwargs`` may set.
        idle_timeout_s: a session unused this long is closed.
        max_sessions: the most open sessions; creating one more answers 503.
        max_body_bytes: a longer request body answers 413 (None: 1 MiB, or more when the env's
            action space admits longer actions).
        threads: env calls running at once (each in a worker thread).
        reap_every_s: how often the reaper looks for idle sessions (default: a quarter of the timeout, at most 5 s).
    """

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    allow_kwargs: frozenset[str] = DEFAULT_ALLOWED_KWARGS
    idle_timeout_s: float = 300.0
    max_sessions: int = 256
    max_body_bytes: int | None = None
    threads: int = 64
    reap_every_s: float | None = None

    def __post_init__(self) -> None:
        if self.env_id not in gym.registry:
            raise ConfigError(
                f"--env {self.env_id!r} is not registered; pass --imports <module> for a third-party env."
            )
        for name in ("idle_timeout_s", "max_sessions", "max_body_bytes", "threads"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}.")


@dataclass
class Session:
    """One client's env, its lock, and when it was last used."""

    id: str
    env: gym.Env[Any, Any]
    kwargs: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)


class EnvServer:
    """The sessions of one env and the work behind each endpoint (the app: :func:`prm_gym.envs.serve.app.build_app`).

    Args:
        cfg: what to serve. The env is made once here, so a bad ``--env-kwargs`` fails at start.
    """

    def __init__(self, cfg: ServerConfig):
        self.cfg = cfg
        self.sessions: dict[str, Session] = {}
        self.closed_by_reaper = 0
        self.creating = 0  # sessions being made (counted against max_sessions)
        probe = gym.make(cfg.env_id, **cfg.env_kwargs)
        try:
            self.tools = list(getattr(probe.unwrapped, "tool_schemas", []))
            max_action = int(getattr(probe.action_space, "max_length", 0))
        finally:
            probe.close()
        need = 12 * max_action + 1024  # JSON escapes a non-BMP character as 12 ASCII bytes
        self.max_body_bytes = cfg.max_body_bytes or max(1 << 20, need)
        if self.max_body_bytes < need:
            raise ConfigError(
                f"--max-body-bytes {cfg.max_body_bytes} cannot carry every action {cfg.env_id} admits "
                f"({max_action} characters); use at least {need}."
            )
        self.limiter = anyio.CapacityLimiter(cfg.threads)

    # ----------------------------------------------------------------- sessions
    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    def _describe(self, sid: str, env: gym.Env[Any, Any]) -> dict[str, Any]:
        base = env.unwrapped
        spec = getattr(base, "judge_spec", None)
        return {
            "session_id": sid,
            "env": self.cfg.env_id,
            "tools": list(getattr(base, "tool_schemas", [])),
            "judge": str(spec) if spec is not None else "",
            "reward_terms": list(getattr(base, "reward_terms", [])),
            "reward_kinds": dict(getattr(base, "reward_kinds", {})),
            "max_action_chars": int(getattr(env.action_space, "max_length", 1 << 20)),
            "max_observation_chars": int(getattr(env.observation_space, "max_length", 1 << 20)),
        }

    def session_kwargs(self, body: dict[str, Any]) -> dict[str, Any]:
        env = body.get("env")
        if env is not None and env != self.cfg.env_id:
            raise HTTPError(400, f"this server serves {self.cfg.env_id!r}, not {env!r}; start one with --env {env}")
        kwargs = body.get("env_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise HTTPError(422, "env_kwargs must be a JSON object")
        refused = sorted(set(kwargs) - self.cfg.allow_kwargs)
        if refused:
            raise HTTPError(
                400,
                f"env_kwargs {refused} may not be set by a client (allowed: {sorted(self.cfg.allow_kwargs)}); "
                "set them in the server's --env-kwargs, or start it with --allow-kwargs naming them",
            )
        return {**self.cfg.env_kwargs, **kwargs}

    def check_capacity(self) -> None:
        """503 when the server already holds ``max_sessions`` sessions."""
        if len(self.sessions) + self.creating >= self.cfg.max_sessions:
            raise HTTPError(503, f"the server holds its --max-sessions limit ({self.cfg.max_sessions}); close sessions")

    async def create(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A new session whose env is made with ``kwargs``; its description."""
        self.check_capacity()
        self.creating += 1
        try:
            env = await self._run(lambda: gym.make(self.cfg.env_id, **kwargs))
        except (ConfigError, TaskError, TypeError) as exc:
            raise HTTPError(400, f"env_kwargs rejected by {self.cfg.env_id}: {type(exc).__name__}: {exc}") from exc
        except InfraError as exc:
            raise HTTPError(503, f"{self.cfg.env_id} could not start: {type(exc).__name__}: {exc}") from exc
        finally:
            self.creating -= 1
        return self.add(env, kwargs)

    def add(self, env: gym.Env[Any, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Register ``env`` as a new session; its description."""
        sid = secrets.token_urlsafe(16)
        self.sessions[sid] = Session(sid, env, kwargs)
        return self._describe(sid, env)

    def get(self, sid: str) -> Session:
        session = self.sessions.get(sid)
        if session is None:
            raise HTTPError(404, f"no session {sid!r} (closed, expired after idling, or never created)")
        session.last_used = time.monotonic()
        return session

    async def close_session(self, session: Session) -> None:
        """Forget ``session`` and close its env (in a worker thread; errors only logged)."""
        self.sessions.pop(session.id, None)
        try:
            await self._run(session.env.close)
        except Exception as exc:  # closing must not take the server down
            print(f"prm-serve: closing session {session.id}: {type(exc).__name__}: {exc}", file=sys.stderr)

    async def call(self, session: Session, what: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (the session's env call) under its lock; map failures to HTTP errors."""
        async with session.lock:
            if self.sessions.get(session.id) is not session:
                raise HTTPError(404, f"no session {session.id!r} (closed while this call waited)")
            try:
                return await self._run(fn)
            except gym.error.ResetNeeded as exc:
                raise HTTPError(409, f"{what}: {exc}") from exc
            except TaskError as exc:
                raise HTTPError(400, f"{what}: {exc}") from exc
            except Exception as exc:  # the env crashed: the session cannot continue
                await self.close_session(session)
                status = 503 if isinstance(exc, InfraError) else 500
                raise HTTPError(status, f"{what} failed, session closed: {type(exc).__name__}: {exc}"[:2000]) from exc
            finally:
                session.last_used = time.monotonic()

    async def reap(self) -> int:
        """Close every session idle past the timeout and not in a call; the number closed."""
        closed = 0
        for s in list(self.sessions.values()):
            if s.lock.locked() or time.monotonic() - s.last_used <= self.cfg.idle_timeout_s:
                continue
            async with s.lock:  # taken at once (it was free): no call can start on it meanwhile
                if self.sessions.get(s.id) is s:
                    await self.close_session(s)
                    closed += 1
        self.closed_by_reaper += closed
        return closed

    async def _reaper(self) -> None:
        every = self.cfg.reap_every_s or min(self.cfg.idle_timeout_s / 4, 5.0)
        while True:
            await asyncio.sleep(every)
            await self.reap()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(self._reaper())
        try:
            yield
        finally:
            task.cancel()
            for s in list(self.sessions.values()):
                await self.close_session(s)

    # ----------------------------------------------------------------- HTTP
    async def body(self, request: Request) -> dict[str, Any]:
        """The request's JSON object; 413 past the size limit, 400 when not UTF-8 JSON."""
        limit = self.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise HTTPError(413, f"request body of {declared} bytes exceeds the limit of {limit} (--max-body-bytes)")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPError(413, f"request body exceeds the limit of {limit} bytes (--max-body-bytes)")
            chunks.append(chunk)
        raw = b"".join(chunks)
        try:
            value = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except UnicodeDecodeError as exc:
            raise HTTPError(400, f"the body is not UTF-8 ({exc}); send UTF-8 JSON") from exc
        except json.JSONDecodeError as exc:
            raise HTTPError(400, f"the body is not JSON ({exc})") from exc
        if not isinstance(value, dict):
            raise HTTPError(422, "the body must be a JSON object")
        return value
