"""Host side of one execution: framing the request, pumping pipes, caps, timeouts and kills.

A *worker* is a started interpreter (inside bubblewrap, a container or a bare process) running
``sandbox/_boot.py``: it announces itself with one ready byte on stdout and then waits for a
request. Starting workers ahead of time is what the warm pool does; a cold run starts one and
uses it at once. Every worker runs exactly one program, so no state survives between runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from prm_gym.core.errors import SandboxError
from prm_gym.sandbox.cgroup import MemoryCgroups
from prm_gym.sandbox.cgroup import remove as remove_cgroup
from prm_gym.sandbox.types import ExecResult

READY = b"\x06"
BOOT_SOURCE = (Path(__file__).parent / "_boot.py").read_text(encoding="utf-8")


def frame_request(files: Mapping[str, str], entry: str, rlimits: Mapping[str, int]) -> bytes:
    """The bytes a worker reads before running: an 8-byte length and a JSON request."""
    body = json.dumps({"files": dict(files), "entry": entry, "rlimits": dict(rlimits)}).encode()
    return len(body).to_bytes(8, "big") + body


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker's whole process group (it was started in a new session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


class Worker:
    """One started interpreter waiting for a single program.

    Args:
        argv: the command that starts the worker (it must run the boot program).
        backend: a label for results.
        signal_is_infra: True when a death by signal of ``argv[0]`` can only come from the host
            (bubblewrap: the program runs inside it and cannot signal it).
        env: the environment of the command.
    """

    def __init__(
        self,
        argv: Sequence[str],
        backend: str,
        *,
        signal_is_infra: bool,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        ready_timeout_s: float = 30.0,
        pass_fds: Sequence[int] = (),
        cgroup: tuple[MemoryCgroups, Path] | None = None,
        wait: bool = True,
    ):
        self.backend = backend
        self.cleanup_dir = cwd
        self.signal_is_infra = signal_is_infra
        self.cgroup = cgroup
        #: True when the sandbox's memory cgroup OOM-killed a process (known once it is killed).
        self.oom_killed = False
        try:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                pass_fds=tuple(pass_fds),
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        except OSError as exc:
            self._drop_cgroup()
            raise SandboxError(f"{backend}: cannot start {argv[0]!r}: {exc}") from exc
        self._ready_timeout_s = ready_timeout_s
        self._ready = False
        if wait:
            self.ensure_ready()

    def ensure_ready(self) -> None:
        """Wait for the worker's ready byte (once); SandboxError when it does not come."""
        if not self._ready:
            self._wait_ready(self._ready_timeout_s)
            self._ready = True

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout_s)
        sel.close()
        first = os.read(self.proc.stdout.fileno(), 1) if ready else b""
        if first != READY:
            kill_group(self.proc)
            err = self.proc.stderr.read().decode("utf-8", "replace") if self.proc.stderr else ""
            self.kill()
            raise SandboxError(f"{self.backend}: the sandbox did not start: {err.strip()[:2000] or 'no output'}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        kill_group(self.proc)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed:
                with contextlib.suppress(OSError):
                    pipe.close()
        self.proc.wait()
        self._drop_cgroup()
        if self.cleanup_dir:
            shutil.rmtree(self.cleanup_dir, ignore_errors=True)

    def _drop_cgroup(self) -> None:
        if self.cgroup is not None:
            groups, path = self.cgroup
            self.oom_killed = self.oom_killed or groups.oom_killed(path)
            remove_cgroup(path)
            self.cgroup = None

    def execute(self, request: bytes, stdin: bytes, timeout_s: float, cap: int) -> ExecResult:
        """Hand the worker its program and collect the result; the worker is spent afterwards."""
        start = time.perf_counter()
        try:
            out, err, truncated, timed_out = _pump(self.proc, request + stdin, start + timeout_s, cap)
        finally:
            self.kill()
        code = self.proc.returncode
        duration = time.perf_counter() - start
        if timed_out:
            code = -1
        elif code < 0:
            if self.signal_is_infra and not self.oom_killed:
                raise SandboxError(f"{self.backend}: the sandbox was killed by signal {-code} (by the host)")
            code = 128 - code
        if self.oom_killed:
            err += b"\n[killed: the sandbox went over its total memory cap]"
        return ExecResult(_decode(out, cap), _decode(err, cap), code, timed_out, duration, truncated, self.backend)


def _decode(data: bytes, cap: int) -> str:
    text = data[:cap].decode("utf-8", "replace")
    if len(data) > cap:
        text += f"\n[... output truncated at {cap} bytes]"
    return text


def _pump(proc: subprocess.Popen[bytes], payload: bytes, deadline: float, cap: int) -> tuple[bytes, bytes, bool, bool]:
    """Write ``payload`` to stdin and read stdout/stderr until EOF or ``deadline``.

    Returns ``(stdout, stderr, truncated, timed_out)``; each stream keeps ``cap + 1`` bytes
    at most (the extra byte marks the truncation) and the rest is read and dropped.
    """
    assert proc.stdin and proc.stdout and proc.stderr
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    dropped = False
    sel = selectors.DefaultSelector()
    os.set_blocking(proc.stdin.fileno(), False)
    sel.register(proc.stdin, selectors.EVENT_WRITE)
    for pipe in (proc.stdout, proc.stderr):
        sel.register(pipe, selectors.EVENT_READ)
    view, pos = memoryview(payload), 0
    timed_out = False
    try:
        while sel.get_map():
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(remaining):
                fd = key.fd
                if key.fileobj is proc.stdin:
                    try:
                        pos += os.write(fd, view[pos : pos + 65536])
                    except (BrokenPipeError, BlockingIOError) as exc:
                        if isinstance(exc, BlockingIOError):
                            continue
                        pos = len(payload)
                    if pos >= len(payload):
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = bufs[fd]
                room = cap + 1 - len(buf)
                if room > 0:
                    buf += chunk[:room]
                dropped = dropped or len(chunk) > room
    finally:
        sel.close()
    out, err = bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()])
    return out, err, dropped or len(out) > cap or len(err) > cap, timed_out
