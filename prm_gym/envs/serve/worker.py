"""Env calls in a child process that can be killed: one session's hang never freezes the server.

Each :class:`EnvWorker` is a child process (started by a ``forkserver`` that has imported
``prm_gym`` once, so a new worker costs a fork, not an interpreter start) holding the env of one
session and of the sessions forked from it (a Tree-GRPO tree), each in a numbered slot. The server
sends ``(request id, slot, op, argument)`` over a pipe; the worker runs each request on a thread
of its own at that moment (an idle one reused, a new one when all are busy, so what an env keeps
per thread, such as the SQL judges' connections, outlives one call) and answers
``(request id, "ok", value)`` or ``(request id, "error", kind, message)``.

:meth:`EnvWorker.call` waits at most its deadline. A call that has not answered by then (an env
stuck in a loop, a tool holding the GIL, a backend that never replies) gets the worker killed with
``SIGKILL`` and raises :class:`WorkerTimeout`; the sessions it held are gone, every other session
and ``/health`` go on, because no env code runs in the server's process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import itertools
import json
import multiprocessing
import queue
import threading
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym

from prm_gym.core.errors import ConfigError, InfraError, TaskError
from prm_gym.envs.serve.wire import to_wire

_CTX = multiprocessing.get_context("forkserver")
#: What a client may read about a task (gold data never leaves the worker).
PUBLIC_META = ("level", "env")
#: Exception kinds the server maps to HTTP statuses (anything else: the env crashed).
_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (gym.error.ResetNeeded, "reset_needed"),
    (TaskError, "task"),
    (ConfigError, "config"),
    (TypeError, "config"),
    (UnicodeError, "crash"),  # the server's own files unreadable: not the client's kwargs
    (json.JSONDecodeError, "crash"),
    (ValueError, "config"),  # at make: a client-set kwarg the env rejects (a negative seed); later: a crash
    (InfraError, "infra"),
)


class WorkerTimeout(Exception):
    """The env call did not answer within its deadline; its worker was killed."""


class WorkerDied(Exception):
    """The worker process ended (killed, crashed or out of memory) before answering."""


class EnvCallError(Exception):
    """The env raised; ``kind`` says whose fault (see ``_KINDS``), the message is the exception's."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def preload(spec: Any, imports: tuple[str, ...]) -> None:
    """Have the forkserver import ``prm_gym``, ``imports`` and the env's module once, so a worker
    starts as a bare fork (effective only before the forkserver first starts)."""
    entry = spec.entry_point
    module = entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", None)
    _CTX.set_forkserver_preload(["prm_gym", *imports, *([module] if module else [])])


def describe(env: gym.Env[Any, Any]) -> dict[str, Any]:
    """What a client learns about a session's env when it opens one."""
    base = env.unwrapped
    spec = getattr(base, "judge_spec", None)
    return {
        "tools": list(getattr(base, "tool_schemas", [])),
        "judge": str(spec) if spec is not None else "",
        "reward_terms": list(getattr(base, "reward_terms", [])),
        "reward_kinds": dict(getattr(base, "reward_kinds", {})),
        "max_action_chars": int(getattr(env.action_space, "max_length", 1 << 20)),
        "max_observation_chars": int(getattr(env.observation_space, "max_length", 1 << 20)),
    }


def _tasks(env: gym.Env[Any, Any]) -> list[dict[str, Any]]:
    tasks = getattr(env.unwrapped, "tasks", None)
    if tasks is None:
        raise TaskError("this env has no task set")
    return [{"id": t.id, "meta": {k: t.meta[k] for k in PUBLIC_META if k in t.meta}} for t in tasks]


def _do(envs: dict[int, gym.Env[Any, Any]], spec: Any, slot: int, op: str, arg: Any) -> Any:
    if op == "make":
        envs[slot] = gym.make(spec, **arg)
        return describe(envs[slot])
    env = envs[slot]
    if op == "reset":
        return env.reset(seed=arg[0], options=arg[1])
    if op == "step":
        return env.step(arg)
    if op == "tasks":
        return _tasks(env)
    if op == "fork":
        fork = getattr(env.unwrapped, "fork", None)
        if fork is None:
            raise TaskError(f"{spec.id} cannot be forked (no fork())")
        envs[arg] = fork()
        return describe(envs[arg])
    if op == "close":
        envs.pop(slot).close()
        return None
    raise ValueError(f"unknown op {op!r}")


class _Threads:
    """Runs each job on an idle daemon thread, starting a new one only when none is idle: concurrent
    jobs never wait for each other, and sequential ones reuse one thread."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Any, tuple[Any, ...]]] = queue.SimpleQueue()
        self._idle = 0  # threads waiting for a job (never more than there are)
        self._lock = threading.Lock()

    def submit(self, fn: Any, *args: Any) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1
        self._jobs.put((fn, args))
        if start:
            threading.Thread(target=self._loop, name="prm-serve-env-call", daemon=True).start()

    def _loop(self) -> None:
        while True:
            fn, args = self._jobs.get()
            fn(*args)
            with self._lock:
                self._idle += 1


def _main(conn: Connection, spec: Any, imports: tuple[str, ...]) -> None:  # pragma: no cover (child)
    for module in imports:
        importlib.import_module(module)
    envs: dict[int, gym.Env[Any, Any]] = {}
    send_lock = threading.Lock()
    threads = _Threads()

    def run(rid: int, slot: int, op: str, arg: Any) -> None:
        try:
            reply: tuple[Any, ...] = (rid, "ok", to_wire(_do(envs, spec, slot, op, arg)))
        except BaseException as exc:
            kind = next((k for t, k in _KINDS if isinstance(exc, t)), "crash")
            reply = (rid, "error", kind, f"{type(exc).__name__}: {exc}"[:2000])
        with send_lock:
            conn.send(reply)

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:  # stop
            break
        rid, slot, op, arg = message
        threads.submit(run, rid, slot, op, arg)
    for env in envs.values():
        with contextlib.suppress(Exception):
            env.close()


class EnvWorker:
    """One child process holding the envs of one session tree (see the module docstring).

    Args:
        spec: the registered env's ``EnvSpec`` (made in the child with ``gym.make``).
        imports: modules the child imports first (third-party envs).
    """

    def __init__(self, spec: Any, imports: tuple[str, ...] = ()):
        self._conn, child = _CTX.Pipe()
        self.proc = _CTX.Process(target=_main, args=(child, spec, imports), name="prm-serve-env", daemon=True)
        self.proc.start()
        child.close()
        self.slots: set[int] = set()
        self.next_slot = 1  # a fork's slot: never reused, so no fork lands on a sibling still closing
        self._ids = itertools.count()
        self._pending: dict[int, concurrent.futures.Future[Any]] = {}
        self._send_lock = threading.Lock()
        self._dead = False
        self._reader = threading.Thread(target=self._read, name="prm-serve-worker-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return not self._dead

    def _read(self) -> None:
        while True:
            try:
                rid, *reply = self._conn.recv()
            except (EOFError, OSError):
                break
            fut = self._pending.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_result(reply)
        self._dead = True
        self._conn.close()  # only this thread closes the pipe (a close under a blocked recv would hang it)
        for fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(WorkerDied(f"the env worker (pid {self.proc.pid}) ended"))
        self._pending.clear()

    def _send(self, message: tuple[Any, ...], fut: concurrent.futures.Future[Any]) -> None:
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError) as exc:  # the worker is gone (or was killed meanwhile)
            if not fut.done():
                fut.set_exception(WorkerDied(f"the env worker could not be reached: {exc}"))

    async def call(self, slot: int, op: str, arg: Any, timeout_s: float) -> Any:
        """Run ``op`` on the env in ``slot``; its value. Raises :class:`EnvCallError` (the env
        raised), :class:`WorkerTimeout` (no answer within ``timeout_s``: the worker is killed) or
        :class:`WorkerDied`."""
        if self._dead:
            raise WorkerDied("the env worker has ended")
        rid = next(self._ids)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._pending[rid] = fut
        # sent from a thread: a worker that stopped reading (GIL held by a runaway tool) must not
        # block the event loop once the pipe's buffer is full; the kill below unblocks the send
        threading.Thread(target=self._send, args=((rid, slot, op, arg), fut), daemon=True).start()
        try:
            reply = await asyncio.wait_for(asyncio.wrap_future(fut), timeout_s)
        except TimeoutError:
            self.kill()
            raise WorkerTimeout(f"{op} did not finish within {timeout_s:g}s") from None
        if reply[0] == "error":
            raise EnvCallError(reply[1], reply[2])
        return reply[1]

    def kill(self) -> None:
        """End the worker now (``SIGKILL``); every pending call fails with :class:`WorkerDied`."""
        self._dead = True
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Let the worker close its envs and exit (killed past ``timeout_s``); blocking."""
        self._dead = True
        if self._send_lock.acquire(timeout=1.0):  # a send stuck on a wedged worker: kill it below
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(None)
            self._send_lock.release()
        self.proc.join(timeout_s)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
