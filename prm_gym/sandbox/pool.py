"""A warm pool: workers started ahead of time, each used for exactly one program.

A short program then pays only for handing over its source and for its own run, not for
starting namespaces and an interpreter. Every worker runs one program and is thrown away, so a
run never sees files, processes or interpreter state left by an earlier one; a background
thread keeps ``size`` fresh workers ready.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.sandbox._exec import Worker
from prm_gym.sandbox.protocol import WorkerSandbox
from prm_gym.sandbox.session import Session
from prm_gym.sandbox.types import ExecResult, Limits


class WarmPool(WorkerSandbox):
    """Keeps ``size`` started workers of ``backend`` ready; ``run`` takes one (or starts one).

    Args:
        backend: the sandbox whose ``spawn`` makes workers (its limits apply).
        size: workers kept ready.
    """

    def __init__(self, backend: WorkerSandbox, size: int = 2):
        super().__init__(backend.limits)
        if size < 1:
            raise ConfigError(f"WarmPool size must be >= 1, got {size}.")
        self.backend = backend
        self.size = size
        self.name = f"{backend.name}-pool"
        self._ready: deque[Worker] = deque()
        self._cond = threading.Condition()
        self.spawn_error: Exception | None = None
        # the thread holds the pool weakly: a pool dropped without close() is collected, and its finalizer
        # kills the ready workers (a bound method as the target kept it, and 18 processes, alive till exit)
        ref = weakref.ref(self)
        self._thread = threading.Thread(target=_refill, args=(ref, self._cond), name=f"{self.name}-refill", daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, _drain, self._ready, self._cond)

    def spawn(self, wait: bool = True) -> Worker:
        worker = self.backend.spawn(wait)
        worker.backend = self.name
        return worker

    def acquire(self, wait: bool = True) -> Worker:
        with self._cond:
            while self._ready:
                worker = self._ready.popleft()
                if worker.alive():
                    return worker
                worker.kill()
        return self.spawn(wait)

    def run(self, *args: Any, **kwargs: Any) -> ExecResult:
        """As :meth:`Sandbox.run`; the spent worker is replaced after the run, off its clock."""
        try:
            return super().run(*args, **kwargs)
        finally:
            with self._cond:
                self._cond.notify_all()

    def sessions(self, *args: Any, **kwargs: Any) -> list[Session]:
        """As :meth:`WorkerSandbox.sessions`; the spent workers are replaced in the background."""
        try:
            return super().sessions(*args, **kwargs)
        finally:
            with self._cond:
                self._cond.notify_all()

    def ready_count(self) -> int:
        with self._cond:
            return len(self._ready)

    def wait_ready(self, timeout_s: float = 10.0) -> bool:
        """Block until ``size`` workers are ready (for benchmarks and tests); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._ready) < self.size and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return len(self._ready) >= self.size

    def close(self) -> None:
        if self._closed:
            return
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=10)
        self._finalizer()
        self.backend.close()


def _drain(ready: deque[Worker], cond: threading.Condition) -> None:
    with cond:
        while ready:
            ready.popleft().kill()
        cond.notify_all()


#: How often an idle refill thread looks whether its pool is still referenced.
_IDLE_CHECK_S = 1.0


def _refill(ref: weakref.ReferenceType[WarmPool], cond: threading.Condition) -> None:
    """Keep ``ref``'s pool at its size until it is closed or collected; it is held strongly only while a
    worker is being started, never while waiting."""
    while True:
        with cond:
            while True:
                pool = ref()
                if pool is None or pool._closed:
                    return
                if len(pool._ready) < pool.size:
                    break
                del pool
                cond.wait(_IDLE_CHECK_S)
        try:
            worker = pool.spawn()
        except Exception as exc:  # reported by the next synchronous spawn in acquire()
            pool.spawn_error = exc
            del pool
            time.sleep(1.0)
            continue
        with cond:
            if pool._closed:
                worker.kill()
                return
            pool._ready.append(worker)
            cond.notify_all()
        del pool


def bwrap_pool(limits: Limits | None = None, *, size: int = 2, **kwargs: Any) -> WarmPool:
    """A :class:`WarmPool` of :class:`prm_gym.sandbox.bwrap.BwrapSandbox` workers."""
    from prm_gym.sandbox.bwrap import BwrapSandbox

    return WarmPool(BwrapSandbox(limits, **kwargs), size=size)
