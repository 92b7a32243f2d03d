"""The env server's sessions: one env instance each, a lock each, an idle reaper.

:class:`EnvServer` holds the sessions of one registered env and does the work behind every
endpoint of :mod:`prm_gym.envs.serve.app`. A session's calls run one at a time (an
``asyncio.Lock`` each). Its env lives in a worker process (:mod:`prm_gym.envs.serve.worker`,
shared with the sessions forked from it), so no env code runs in the server's process: a call
that does not answer within ``call_timeout_s`` gets its worker killed and 504, and the server,
``/health`` and every other session go on. A session belongs to the client that created it
(:mod:`prm_gym.envs.serve.auth`). A session idle for ``idle_timeout_s`` is closed by a reaper
that calls ``env.close()`` (sandboxes and databases released). An exception out of
``reset``/``step``, other than the client's mistakes (an unknown task id: 400; stepping a
finished episode: 409), answers 5xx with the reason and closes the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import gymnasium as gym

import prm_gym  # noqa: F401  (registers prm/ ids)
from prm_gym.core.errors import ConfigError
from prm_gym.envs.serve import auth
from prm_gym.envs.serve.errors import HTTPError
from prm_gym.envs.serve.limits import KwargBounds, parse_json_object, read_body
from prm_gym.envs.serve.worker import EnvCallError, EnvWorker, WorkerDied, WorkerTimeout, preload

if TYPE_CHECKING:
    from fastapi import FastAPI, Request

#: Session keyword arguments a client may set unless ``--allow-kwargs`` says otherwise: they pick
#: which generated tasks a session plays, or how its policy writes tool calls (``tool_format``),
#: never a file, a URL or a sandbox setting.
DEFAULT_ALLOWED_KWARGS = frozenset({"split", "levels", "num_tasks", "task_seed", "tool_format"})
#: How long closing a session's env may take before its worker is killed.
CLOSE_TIMEOUT_S = 10.0

__all__ = ["DEFAULT_ALLOWED_KWARGS", "EnvServer", "HTTPError", "ServerConfig", "Session"]


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
        threads: env calls running at once.
        reap_every_s: how often the reaper looks for idle sessions (default: a quarter of the timeout, at most 5 s).
        token: the shared secret clients must send (None: none asked; only for loopback).
        call_timeout_s: the deadline of one env call (making, reset, step, fork, tasks); past it the
            session's worker process is killed and the call answers 504.
        body_timeout_s: the deadline for receiving a request's whole body (408 past it).
        bounds: the bounds on client-set env kwargs.
        imports: modules the worker processes import first (third-party envs).
    """

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    allow_kwargs: frozenset[str] = DEFAULT_ALLOWED_KWARGS
    idle_timeout_s: float = 300.0
    max_sessions: int = 256
    max_body_bytes: int | None = None
    threads: int = 64
    reap_every_s: float | None = None
    token: str | None = None
    call_timeout_s: float = 60.0
    body_timeout_s: float = 10.0
    bounds: KwargBounds = field(default_factory=KwargBounds)
    imports: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.env_id not in gym.registry:
            raise ConfigError(
                f"--env {self.env_id!r} is not registered; pass --imports <module> for a third-party env."
            )
        for name in ("idle_timeout_s", "max_sessions", "max_body_bytes", "threads", "call_timeout_s", "body_timeout_s"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}.")


@dataclass
class Session:
    """One client's env (a slot in a worker process), its owner, its lock, and when it was last used."""

    id: str
    worker: EnvWorker
    slot: int
    kwargs: dict[str, Any]
    owner: str
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
        self.spec = gym.spec(cfg.env_id)
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
        preload(self.spec, cfg.imports)

    # ----------------------------------------------------------------- access
    def owner(self, request: Request) -> str:
        """The caller's owner key; 401 without the server's token."""
        if not auth.host_ok(request.headers.get("host"), self.cfg.token):
            raise HTTPError(403, "a server without a token answers only requests addressed to a loopback host")
        if not auth.token_ok(request.headers.get("authorization"), self.cfg.token):
            raise HTTPError(401, "missing or wrong token: send 'Authorization: Bearer <token>' (RemoteEnv(token=...))")
        return auth.owner(self.cfg.token, request.headers.get(auth.CLIENT_HEADER))

    def get(self, sid: str, owner: str) -> Session:
        session = self.sessions.get(sid)
        if session is None or not secrets.compare_digest(session.owner, owner):
            raise HTTPError(404, f"no session {sid!r} (closed, expired after idling, or never created)")
        session.last_used = time.monotonic()
        return session

    # ----------------------------------------------------------------- sessions
    def session_kwargs(self, body: dict[str, Any]) -> dict[str, Any]:
        env = body.get("env")
        if env is not None and env != self.cfg.env_id:
            raise HTTPError(
                400, f"this server serves {self.cfg.env_id!r}, not {str(env)[:200]!r}; start one with --env {env}"
            )
        kwargs = body.get("env_kwargs", {})
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict):
            raise HTTPError(422, "env_kwargs must be a JSON object")
        refused = sorted(set(kwargs) - self.cfg.allow_kwargs)
        if refused:
            raise HTTPError(
                400,
                f"env_kwargs {refused[:20]} may not be set by a client (allowed: {sorted(self.cfg.allow_kwargs)}); "
                "set them in the server's --env-kwargs, or start it with --allow-kwargs naming them",
            )
        self.cfg.bounds.check(kwargs)
        return {**self.cfg.env_kwargs, **kwargs}

    def check_capacity(self) -> None:
        """503 when the server already holds ``max_sessions`` sessions."""
        if len(self.sessions) + self.creating >= self.cfg.max_sessions:
            raise HTTPError(503, f"the server holds its --max-sessions limit ({self.cfg.max_sessions}); close sessions")

    def _add(
        self, worker: EnvWorker, slot: int, kwargs: dict[str, Any], owner: str, desc: dict[str, Any]
    ) -> dict[str, Any]:
        sid = secrets.token_urlsafe(16)
        worker.slots.add(slot)
        self.sessions[sid] = Session(sid, worker, slot, kwargs, owner)
        return {"session_id": sid, "env": self.cfg.env_id, **desc}

    async def create(self, kwargs: dict[str, Any], owner: str) -> dict[str, Any]:
        """A new session (in a new worker) whose env is made with ``kwargs``; its description."""
        self.check_capacity()
        self.creating += 1
        try:
            worker = await anyio.to_thread.run_sync(EnvWorker, self.spec, self.cfg.imports)
            try:
                desc = await self._call(worker, 0, "make", kwargs, "make")
            except BaseException:
                await anyio.to_thread.run_sync(worker.kill)
                raise
        finally:
            self.creating -= 1
        return self._add(worker, 0, kwargs, owner, desc)

    async def fork(self, session: Session) -> dict[str, Any]:
        """A new session at ``session``'s turn boundary, in the same worker; its description.

        The capacity check, the new slot and its reservation happen with no await between them, so
        concurrent forks (of this session or of another in its worker) together stay within
        ``max_sessions``; a worker never gives a slot number twice, so a fork cannot land on a
        sibling whose env is still closing."""
        self.check_capacity()
        worker = session.worker
        slot, worker.next_slot = worker.next_slot, worker.next_slot + 1  # never reused
        worker.slots.add(slot)  # reserved: the worker stays up while the fork is made
        self.creating += 1
        try:
            desc = await self.call(session, "fork", slot)
        except BaseException:
            worker.slots.discard(slot)
            if not worker.slots and worker.alive:  # the parent closed meanwhile: the worker ends with it
                await anyio.to_thread.run_sync(worker.stop, CLOSE_TIMEOUT_S)
            raise
        finally:
            self.creating -= 1
        return self._add(worker, slot, session.kwargs, session.owner, desc)

    async def _call(self, worker: EnvWorker, slot: int, op: str, arg: Any, what: str) -> Any:
        """One env call under the deadline; the env's failures as HTTP errors."""
        try:
            async with self.limiter:
                return await worker.call(slot, op, arg, self.cfg.call_timeout_s)
        except WorkerTimeout as exc:
            await self._drop_worker(worker)
            raise HTTPError(504, f"{what}: {exc} (--call-timeout-s); its worker was killed, session closed") from exc
        except WorkerDied as exc:
            await self._drop_worker(worker)
            raise HTTPError(503, f"{what}: {exc}; session closed") from exc
        except EnvCallError as exc:
            if exc.kind == "reset_needed":
                raise HTTPError(409, f"{what}: {exc}") from exc
            if exc.kind == "task":
                raise HTTPError(400, f"{what}: {exc}") from exc
            if op == "make" and exc.kind == "config":
                raise HTTPError(400, f"env_kwargs rejected by {self.cfg.env_id}: {exc}") from exc
            if op == "make":
                status = 503 if exc.kind == "infra" else 500
                raise HTTPError(status, f"{self.cfg.env_id} could not start: {exc}") from exc
            raise  # the env crashed: the caller closes the session

    async def call(self, session: Session, what: str, arg: Any = None) -> Any:
        """Run the env call ``what`` on ``session`` under its lock; map failures to HTTP errors."""
        async with session.lock:
            if self.sessions.get(session.id) is not session:
                raise HTTPError(404, f"no session {session.id!r} (closed while this call waited)")
            try:
                return await self._call(session.worker, session.slot, what, arg, what)
            except EnvCallError as exc:  # the env crashed: the session cannot continue
                await self.close_session(session)
                status = 503 if exc.kind == "infra" else 500
                raise HTTPError(status, f"{what} failed, session closed: {exc}"[:2000]) from exc
            finally:
                session.last_used = time.monotonic()

    async def kill(self, session: Session) -> None:
        """End ``session``'s worker now (with the sessions forked alongside it): a running call fails 503."""
        await self._drop_worker(session.worker)

    async def _drop_worker(self, worker: EnvWorker) -> None:
        """Forget every session of a killed or dead worker."""
        for s in list(self.sessions.values()):
            if s.worker is worker:
                self.sessions.pop(s.id, None)
        worker.slots.clear()
        await anyio.to_thread.run_sync(worker.kill)

    async def close_session(self, session: Session) -> None:
        """Forget ``session`` and close its env (errors only logged); the worker ends with its last session."""
        self.sessions.pop(session.id, None)
        worker = session.worker
        if session.slot not in worker.slots:
            return
        worker.slots.discard(session.slot)
        try:
            if not worker.slots:
                await anyio.to_thread.run_sync(worker.stop, CLOSE_TIMEOUT_S)  # closes the env, then exits
            elif worker.alive:
                await worker.call(session.slot, "close", None, CLOSE_TIMEOUT_S)
        except Exception as exc:  # closing must not take the server down
            print(f"prm-serve: closing session {session.id}: {type(exc).__name__}: {exc}", file=sys.stderr)
            if isinstance(exc, WorkerTimeout):
                await self._drop_worker(worker)

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
        """The request's JSON object: 415 unless sent as ``application/json`` (so a web page cannot
        post to a tokenless server on the user's loopback: browsers send other types without asking),
        413 past the size limit, 408 past the body-read deadline, 400 when it is not UTF-8 JSON
        within the nesting bound."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise HTTPError(415, f"send the body as JSON with 'Content-Type: application/json', not {kind[:80]!r}")
        return parse_json_object(await read_body(request, self.max_body_bytes, self.cfg.body_timeout_s))
