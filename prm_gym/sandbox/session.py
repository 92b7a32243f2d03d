"""An interactive run: a sandboxed program that the host talks to line by line.

``Sandbox.run`` hands a program its whole stdin and collects its output at the end; a
:class:`Session` instead keeps the program's pipes open, so the host can send a line, wait
for the reply line under a deadline, and send the next. The unit-test judge uses two sessions
per grading: the candidate program in one sandbox, the task's tests in another, with the host
relaying plain values between them (see :mod:`prm_gym.rewards.unit_tests`).
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import time
from enum import Enum
from types import TracebackType
from typing import Self

from prm_gym.core.errors import SandboxError
from prm_gym.sandbox._exec import Worker

#: Bytes of stderr kept from a session (for the judge's detail).
STDERR_CAP = 8 * 1024


class Read(Enum):
    """How a :meth:`Session.read_line` ended."""

    LINE = "line"
    EOF = "eof"
    TIMEOUT = "timeout"
    OVERFLOW = "overflow"


class Session:
    """A started worker running one program whose stdin/stdout the host drives.

    Args:
        worker: a started worker (its program is sent at once).
        request: the framed request (:func:`prm_gym.sandbox._exec.frame_request`).
    """

    def __init__(self, worker: Worker, request: bytes):
        self.worker = worker
        proc = worker.proc
        assert proc.stdin and proc.stdout and proc.stderr
        self._out = proc.stdout.fileno()
        self._err = proc.stderr.fileno()
        self._in = proc.stdin.fileno()
        for fd in (self._out, self._err, self._in):
            os.set_blocking(fd, False)
        self._buf = bytearray()
        self._eof = False
        self.stderr = bytearray()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._out, selectors.EVENT_READ)
        self._sel.register(self._err, selectors.EVENT_READ)
        self._closed = False
        if not self.send(request, time.monotonic() + 30.0):
            raise SandboxError(f"{worker.backend}: the sandbox did not take its program")

    def send(self, data: bytes, deadline: float) -> bool:
        """Write ``data`` to the program's stdin before ``deadline``; False if it stopped reading."""
        view, pos = memoryview(data), 0
        while pos < len(data):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _, ready, _ = select.select([], [self._in], [], left)
            if not ready:
                continue
            try:
                pos += os.write(self._in, view[pos : pos + 65536])
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                return False
        return True

    def read_line(self, deadline: float, limit: int) -> tuple[Read, bytes]:
        """The next line of the program's stdout (without its newline), or why there is none.

        A line longer than ``limit`` bytes ends the read with :attr:`Read.OVERFLOW`.
        """
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                if nl > limit:
                    return Read.OVERFLOW, b""
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                return Read.LINE, line
            if len(self._buf) > limit:
                return Read.OVERFLOW, b""
            if self._eof:
                return Read.EOF, b""
            left = deadline - time.monotonic()
            if left <= 0:
                return Read.TIMEOUT, b""
            for key, _ in self._sel.select(left):
                self._pump(int(key.fd))

    def _pump(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if fd == self._err:
            if not chunk:
                self._sel.unregister(fd)
            elif len(self.stderr) < STDERR_CAP:
                self.stderr += chunk[: STDERR_CAP - len(self.stderr)]
            return
        if not chunk:
            self._eof = True
            self._sel.unregister(fd)
            return
        self._buf += chunk

    def close(self) -> None:
        """Kill the program; a worker that had died by a signal from the host is a SandboxError."""
        if self._closed:
            return
        self._closed = True
        code = self.worker.proc.poll()
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.close()
        self.worker.kill()
        if code is not None and code < 0 and self.worker.signal_is_infra and not self.worker.oom_killed:
            raise SandboxError(f"{self.worker.backend}: the sandbox was killed by signal {-code} (by the host)")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            with contextlib.suppress(SandboxError):
                self.close()
