"""Optional backend: one Docker container per run, through the docker SDK (``pip install docker``).

The container has no network (``network_mode="none"``), a memory and a PID limit, a read-only
root file system with a tmpfs work directory, and is removed after the run. Each run is a cold
start; use it where bubblewrap is unavailable or a specific image is needed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from prm_gym.core.errors import SandboxError
from prm_gym.sandbox._exec import BOOT_SOURCE, frame_request
from prm_gym.sandbox.protocol import MAIN_FILE, WorkerSandbox, program_files
from prm_gym.sandbox.types import ExecResult, Limits


def docker_client() -> Any:
    """A connected docker client.

    Raises:
        SandboxError: the SDK is missing or no daemon answers (the message says which).
    """
    try:
        import docker
    except ImportError as exc:
        raise SandboxError("the docker backend needs the docker SDK: pip install 'prm-gym[docker]'") from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise SandboxError(f"no Docker daemon answered ({type(exc).__name__}: {exc})") from exc
    return client


class DockerSandbox(WorkerSandbox):
    """Runs each program in a fresh container of ``image``.

    Args:
        limits: resource limits (memory, processes, timeout, output cap, tmpfs size).
        image: an image with ``python`` on PATH.
    """

    name = "docker"

    def __init__(self, limits: Limits | None = None, *, image: str = "python:3.11-slim"):
        super().__init__(limits)
        self.image = image
        self.client = docker_client()

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
                network_mode="none",
                mem_limit=f"{self.limits.memory_mb}m",
                pids_limit=self.limits.processes,
                read_only=True,
                tmpfs={"/work": f"size={self.limits.tmpfs_mb}m"},
                working_dir="/work",
                user="65534:65534",
            )
        except Exception as exc:
            raise SandboxError(f"docker: cannot create a container of {self.image!r}: {exc}") from exc
        try:
            return self._execute(container, request + stdin.encode(), timeout_s, start)
        finally:
            container.remove(force=True)

    def _execute(self, container: Any, payload: bytes, timeout_s: float, start: float) -> ExecResult:
        sock = container.attach_socket(params={"stdin": 1, "stream": 1})
        container.start()
        sock._sock.sendall(payload)
        sock._sock.shutdown(1)
        timed_out = False
        try:
            status = container.wait(timeout=timeout_s)["StatusCode"]
        except Exception:
            timed_out, status = True, -1
            container.kill()
        cap = self.limits.output_cap
        out = container.logs(stdout=True, stderr=False)[1:]  # drop the ready byte
        err = container.logs(stdout=False, stderr=True)
        truncated = len(out) > cap or len(err) > cap
        return ExecResult(
            out[:cap].decode("utf-8", "replace"),
            err[:cap].decode("utf-8", "replace"),
            status,
            timed_out,
            time.perf_counter() - start,
            truncated,
            self.name,
        )
