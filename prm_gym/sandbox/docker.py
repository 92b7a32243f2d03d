"""Optional backend: one Docker container per run, through the docker SDK (``pip install docker``).

The container has no network (``network_mode="none"``), a memory and a PID limit, a read-only
root file system with a tmpfs work directory owned by the unprivileged user the program runs
as, a small init as PID 1 (so the program gets the signals it would elsewhere), and is removed
after the run. Output is read from the attach stream as it comes, at most ``output_cap`` bytes
of each stream kept, and the container is killed at the deadline (counted from its start). Each
run is a cold start; use it where bubblewrap is unavailable or a specific image is needed.

The daemon and the image are checked when the sandbox is made (so an env that asks for Docker
fails at ``gym.make`` with the fix, not on every turn). Where no registry is reachable, build an
image from this machine's Python with ``python -m prm_gym.sandbox.docker_image`` (see
:mod:`prm_gym.sandbox.docker_image`) and pass its tag as ``image``.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Mapping
from typing import Any

from prm_gym.core.errors import SandboxError
from prm_gym.core.extras import require
from prm_gym.sandbox._exec import BOOT_SOURCE, frame_request
from prm_gym.sandbox.protocol import MAIN_FILE, WorkerSandbox, program_files
from prm_gym.sandbox.types import ExecResult, Limits

DAEMON_HINT = (
    "start one (`systemctl start docker`, or `dockerd` as root; Debian/Ubuntu: `apt-get install docker.io`), "
    "point DOCKER_HOST or base_url at it, or pick another backend (sandbox='bwrap')"
)


def docker_client(base_url: str | None = None) -> Any:
    """A connected docker client: for the daemon at ``base_url`` (e.g. ``unix:///run/docker.sock``),
    else the one ``DOCKER_HOST`` or the default socket names.

    Raises:
        SandboxError: the SDK is missing or no daemon answers (the message says which, and the fix).
    """
    docker = require("docker", "docker", "the docker sandbox (sandbox='docker')")
    try:
        client = docker.DockerClient(base_url=base_url, timeout=30) if base_url else docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        where = base_url or "DOCKER_HOST / the default socket"
        raise SandboxError(
            f"no Docker daemon answered at {where} ({type(exc).__name__}: {exc}); {DAEMON_HINT}."
        ) from exc
    return client


NOBODY = 65534  # the user and group programs run as
KILL_WAIT_S = 10.0  # seconds the exit status may take once the output has ended


class DockerSandbox(WorkerSandbox):
    """Runs each program in a fresh container of ``image``.

    Args:
        limits: resource limits (memory, processes, timeout, output cap, tmpfs size).
        image: an image with ``python`` on PATH, already on the daemon (nothing is pulled).
        base_url: the daemon (None: ``DOCKER_HOST`` or the default socket).

    Raises:
        SandboxError: the SDK or the daemon is missing, or the daemon has no such image.
    """

    name = "docker"

    def __init__(self, limits: Limits | None = None, *, image: str = "python:3.11-slim", base_url: str | None = None):
        super().__init__(limits)
        self.image = image
        self.client = docker_client(base_url)
        try:
            self.client.images.get(image)
        except Exception as exc:
            raise SandboxError(
                f"the Docker daemon has no image {image!r} ({type(exc).__name__}); pull it (`docker pull {image}`) "
                "or, offline, build one from this machine's Python with `python -m prm_gym.sandbox.docker_image` "
                "and pass the tag it prints as image."
            ) from exc

    def close(self) -> None:
        super().close()
        self.client.close()

    def run(
        self,
        code: str | None = None,
        *,
        files: Mapping[str, str] | None = None,
        entry: str = MAIN_FILE,
        stdin: str = "",
        timeout: float | None = None,
    ) -> ExecResult:
        if self._closed:
            raise SandboxError("docker: run() on a closed sandbox; make a new one.")
        timeout_s = float(timeout if timeout is not None else self.limits.timeout_s)
        request = frame_request(program_files(code, files, entry), entry, self.limits.rlimits(timeout_s))
        start = time.perf_counter()
        try:
            container = self.client.containers.create(
                self.image,
                ["python", "-I", "-S", "-c", BOOT_SOURCE],
                stdin_open=True,
                init=True,  # a small init is PID 1: the program gets normal signals, zombies are reaped
                network_mode="none",
                log_config={"type": "none"},  # the output is read from the attach stream, never stored
                mem_limit=f"{self.limits.memory_mb}m",
                pids_limit=self.limits.processes,
                read_only=True,
                # owned by the unprivileged user (a mode option loses to the image's own /work, copied up)
                tmpfs={"/work": f"size={self.limits.tmpfs_mb}m,uid={NOBODY},gid={NOBODY}"},
                working_dir="/work",
                user=f"{NOBODY}:{NOBODY}",
            )
        except Exception as exc:
            raise SandboxError(f"docker: cannot create a container of {self.image!r}: {exc}") from exc
        try:
            return self._execute(container, request + stdin.encode(), timeout_s, start)
        finally:
            container.remove(force=True)

    def _execute(self, container: Any, payload: bytes, timeout_s: float, start: float) -> ExecResult:
        """Start the container, feed it the request and read its output as it comes, at most
        ``output_cap`` bytes of each stream kept, until it ends or the deadline (``timeout_s``
        after the start) passes; then kill it."""
        sock = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        raw = sock._sock
        try:
            container.start()
            deadline = time.perf_counter() + timeout_s
            out, err, timed_out, truncated = _stream(raw, payload, deadline, self.limits.output_cap)
        finally:  # first: a daemon blocked writing output to this stream would not kill the container
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)  # at once, whatever else holds the socket open
            sock.close()
            raw.close()
        status = -1
        if timed_out:
            container.kill()
        else:
            try:
                status = int(container.wait(timeout=KILL_WAIT_S)["StatusCode"])
            except Exception:  # the output ended but the process lingers: past its deadline now
                timed_out = True
                container.kill()
        return ExecResult(
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            status,
            timed_out,
            time.perf_counter() - start,
            truncated,
            self.name,
        )


def _stream(raw: socket.socket, payload: bytes, deadline: float, cap: int) -> tuple[bytes, bytes, bool, bool]:
    """Send ``payload`` and read Docker's multiplexed output frames (8-byte header: stream, size)
    from ``raw`` until EOF or ``deadline``: ``(stdout, stderr, timed_out, truncated)``, each stream
    cut to ``cap`` bytes (what is past it is read and dropped, so the program never blocks)."""
    kept = {1: bytearray(), 2: bytearray()}
    pending = bytearray()
    try:
        raw.settimeout(max(deadline - time.perf_counter(), 0.001))
        raw.sendall(payload)
        raw.shutdown(socket.SHUT_WR)
        while True:
            raw.settimeout(max(deadline - time.perf_counter(), 0.001))
            chunk = raw.recv(1 << 16)
            if not chunk:
                break
            pending += chunk
            while len(pending) >= 8 and len(pending) >= 8 + int.from_bytes(pending[4:8], "big"):
                kind, size = pending[0], int.from_bytes(pending[4:8], "big")
                if kind in kept:
                    room = cap + 1 + (kind == 1) - len(kept[kind])  # stdout also holds the ready byte
                    kept[kind] += pending[8 : 8 + min(size, max(room, 0))]
                del pending[: 8 + size]
        timed_out = False
    except (TimeoutError, OSError):
        timed_out = True
    out, err = bytes(kept[1][1:]), bytes(kept[2])  # drop the ready byte
    truncated = len(out) > cap or len(err) > cap
    return out[:cap], err[:cap], timed_out, truncated
