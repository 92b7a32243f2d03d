"""Symbolic math checks in child processes that can be killed: a verdict within a deadline from any thread.

math-verify (sympy) can run for minutes on a short hostile answer (``9^{9^{9^{9}}}`` asks for
an integer with more digits than atoms in the universe) while holding the GIL, and its own
timeouts use ``SIGALRM``, which works only on the main thread. So the check runs in a small pool
of child interpreters (``python -c``, no ``multiprocessing`` re-import of the caller's main
module), each answering one JSON line per request.

The deadline is CPU time, so what an answer costs decides its verdict, not how busy the machine
is: each check runs under a CPU-time timer (``ITIMER_PROF``) whose signal ends the child; the
caller gets :class:`VerifyTimeout`, the agent's answer being too expensive to check. Wall clock is
bounded too, at :data:`WALL_FACTOR` times the deadline from the check's start: a check past it while
under its CPU time means the machine is saturated, an infrastructure failure
(:class:`~prm_gym.core.errors.JudgeError`), never a wrong answer. Either way the child is killed
(``SIGKILL``) and replaced. A request that finds every child busy waits at most its deadline for one,
then starts a child of its own (up to :data:`MAX_CHILDREN`), so no answer's verdict depends on the
answers queued ahead of it; the extra children are ended when they finish.

A child is capped at :data:`CHILD_MEMORY_BYTES` of address space, so a blow-up ends as a
``MemoryError`` inside the child, reported as an error for that answer. Children are started on
demand (at most ``max_workers`` at once), killed at interpreter exit, and never shared across
``os.fork()``: a forked process starts its own.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time

from prm_gym.core.errors import JudgeError

#: Address-space cap of one child (a runaway sympy computation dies there, not in the host).
CHILD_MEMORY_BYTES = 2 << 30
#: How long a fresh child may take to import math-verify before the pool gives up (infrastructure).
STARTUP_TIMEOUT_S = 60.0
#: A check's wall-clock bound, in multiples of its CPU-time deadline, from the check's start (a child's
#: start and the wait for a child not included): past it the machine is saturated (infrastructure).
WALL_FACTOR = 10.0
#: Children alive at most, those started by requests that waited included; past it a request waits up
#: to :data:`WALL_FACTOR` times its deadline for one, then is infrastructure (the pool is saturated).
MAX_CHILDREN = 32

_CHILD = """
import json, resource, signal, sys
signal.signal(signal.SIGALRM, signal.SIG_DFL)  # an alarm ends the process, whatever holds the GIL
signal.signal(signal.SIGPROF, signal.SIG_DFL)  # so does the CPU-time timer: the check's deadline
try:
    resource.setrlimit(resource.RLIMIT_AS, ({mem}, {mem}))
except (ValueError, OSError):
    pass
import logging
logging.disable(logging.CRITICAL)
from math_verify import parse, verify
reply, sys.stdout = sys.stdout, sys.stderr  # stray prints from libraries never reach the replies
print("ready", file=reply, flush=True)
for line in sys.stdin:
    try:
        gold, answer, cpu, limit = json.loads(line)
        signal.alarm(limit)  # a backstop: a child orphaned mid-check still dies
        signal.setitimer(signal.ITIMER_PROF, cpu)  # CPU seconds of this process, from now
        g = parse(gold, parsing_timeout=None)
        a = parse(answer, parsing_timeout=None)
        out = {{"equal": bool(g and a and verify(g, a, timeout_seconds=None))}}
    except BaseException as exc:
        out = {{"error": type(exc).__name__ + ": " + str(exc)[:200]}}
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.alarm(0)
    print(json.dumps(out), file=reply, flush=True)
"""


class VerifyTimeout(Exception):
    """The check used its CPU-time deadline without a verdict (the answer's cost); the child was killed."""


class VerifyFailed(Exception):
    """math-verify raised, or its child died, on this input."""


class _Child:
    """One child interpreter running math-verify."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(  # -P: the working directory does not shadow the child's imports
            [sys.executable, "-P", "-c", _CHILD.format(mem=CHILD_MEMORY_BYTES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.ready = False
        self._buffer = b""

    def _line(self, deadline: float) -> bytes | None:
        """The next output line, or None when the deadline passes or the child dies."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def wait_ready(self) -> None:
        if self.ready:
            return
        if self._line(time.monotonic() + STARTUP_TIMEOUT_S) != b"ready":
            self.kill()
            raise JudgeError(f"the math-verify worker did not start within {STARTUP_TIMEOUT_S}s")
        self.ready = True

    def ask(self, gold: str, answer: str, timeout_s: float, deadline: float) -> bool:
        """The verdict within ``timeout_s`` of the child's CPU time and by ``deadline`` (monotonic)."""
        assert self.proc.stdin is not None
        try:
            backstop = math.ceil(max(0.0, deadline - time.monotonic())) + 5  # the parent kills it before
            self.proc.stdin.write(json.dumps([gold, answer, timeout_s, backstop]).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            self.kill()
            raise VerifyFailed("the math-verify worker died") from None
        line = self._line(deadline)
        if line is None:
            try:
                code = self.proc.wait(timeout=0.5)  # output closed: the child is ending
            except subprocess.TimeoutExpired:
                code = None
            self.kill()
            if code == -signal.SIGPROF:
                raise VerifyTimeout(f"no verdict within {timeout_s}s of CPU time")
            if code is not None:
                raise VerifyFailed("the math-verify worker died on this input")
            raise JudgeError(
                f"math-verify: no verdict by the wall-clock bound ({WALL_FACTOR:g} x {timeout_s}s) though "
                f"the check had not used its {timeout_s}s of CPU time: the machine or the pool is saturated"
            )
        reply = json.loads(line)
        if "error" in reply:
            raise VerifyFailed(str(reply["error"]))
        return bool(reply["equal"])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class VerifyPool:
    """``max_workers`` children kept; each request takes an idle one (or starts one).

    When more threads check at once than there are children, a request waits for a free child for
    at most its deadline, then starts one more (up to :data:`MAX_CHILDREN`; it is ended after the check).

    Args:
        max_workers: children kept alive between checks.
    """

    def __init__(self, max_workers: int = 2) -> None:
        self.max_workers = max_workers
        self._idle: list[_Child] = []
        self._alive: set[_Child] = set()
        self._starting = 0
        self._cond = threading.Condition()
        self._pid = os.getpid()
        self.requests = 0  # checks asked of the children, for tests and diagnostics

    def _spawn(self) -> _Child:
        """A new child, counted (the caller holds no lock)."""
        try:
            child = _Child()
        except OSError as exc:
            raise JudgeError(f"cannot start a math-verify worker: {exc}") from None
        with self._cond:
            self._alive.add(child)
        return child

    def _take(self, patience_s: float, deadline: float) -> _Child:
        """An idle child, or a new one while there is room; after ``patience_s`` of waiting, room goes up to
        :data:`MAX_CHILDREN`; :class:`JudgeError` when there is none by ``deadline`` (monotonic)."""
        surge_at = time.monotonic() + patience_s
        with self._cond:
            if self._pid != os.getpid():  # forked: the children belong to the parent
                self._idle, self._alive, self._starting, self._pid = [], set(), 0, os.getpid()
            while not self._idle:
                now = time.monotonic()
                if self._room(self.max_workers if now < surge_at else MAX_CHILDREN):
                    break
                if now >= deadline:
                    raise JudgeError(
                        f"math-verify: no worker free in time: {len(self._alive)} busy with other checks "
                        "(the pool is saturated)"
                    )
                self._cond.wait((surge_at if now < surge_at else deadline) - now)
            if self._idle:
                return self._idle.pop()
            self._starting += 1  # holds the slot while the child starts
        try:
            return self._spawn()
        finally:
            with self._cond:
                self._starting -= 1
                self._cond.notify()

    def _room(self, limit: int | None = None) -> bool:
        """Whether another child may start, ``limit`` children at most (call with the lock held)."""
        return len(self._alive) + self._starting < (self.max_workers if limit is None else limit)

    def verify(self, gold: str, answer: str, timeout_s: float) -> bool:
        """Whether math-verify finds ``answer`` equal to ``gold`` (both with math delimiters).

        Raises:
            VerifyTimeout: the check used ``timeout_s`` of CPU time (the child was killed and is replaced).
            VerifyFailed: math-verify raised on the input, or its child died.
            JudgeError: no child could be started; or :data:`MAX_CHILDREN` were busy for :data:`WALL_FACTOR`
                x ``timeout_s``; or no verdict came within :data:`WALL_FACTOR` x ``timeout_s`` of wall clock
                from the check's start while it was still under its CPU time (infrastructure: the machine or
                the pool is saturated).
        """
        self.requests += 1
        child = self._take(timeout_s, time.monotonic() + WALL_FACTOR * timeout_s)
        try:
            child.wait_ready()  # a child's start is not part of the bound
            result = child.ask(gold, answer, timeout_s, time.monotonic() + WALL_FACTOR * timeout_s)
        except BaseException as exc:
            if isinstance(exc, VerifyFailed) and child.alive():  # it answered with an error: still in step
                self._give_back(child)
            else:  # dead, hung, or interrupted mid-request (its next line would answer the wrong question)
                self._discard(child)
                self._replace()
            raise
        self._give_back(child)
        return result

    def _discard(self, child: _Child) -> None:
        child.kill()
        with self._cond:
            self._alive.discard(child)
            self._cond.notify()

    def _replace(self) -> None:
        """Start a child in place of a killed one, so the next request need not wait for its import."""
        with self._cond:
            if not self._room():
                return
            self._starting += 1
        try:
            self._give_back(self._spawn())
        except JudgeError:
            return  # the next request tries again, and reports it
        finally:
            with self._cond:
                self._starting -= 1

    def _give_back(self, child: _Child) -> None:
        with self._cond:
            ours = self._pid == os.getpid() and child in self._alive  # not a child of the process forked from
            extra = ours and len(self._alive) > self.max_workers  # one started by a request that waited
            if ours and not extra:
                self._idle.append(child)
            self._cond.notify()
        if extra:
            self._discard(child)

    def close(self) -> None:
        """Kill every child, idle or busy (a busy request then fails as a dead child)."""
        with self._cond:
            children, self._alive, self._idle = set(self._alive), set(), []
            self._cond.notify_all()
        for child in children:
            child.kill()


POOL = VerifyPool()
atexit.register(POOL.close)
