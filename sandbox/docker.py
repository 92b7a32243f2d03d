"""Optional backend: one Docker container per run, through the docker SDK (``pip install docker``).

The container has no network (``network_mode="none"``), a memory and a PID limit, a read-only
root file system with a tmpfs work directory, and is removed after the run. Each run is a cold
start; use it where bubblewrap is unavailable or a specific image is needed.

The daemon and the image are checked when the sandbox is made (so an env that asks for Docker
fails at ``gym.make`` with the fix, not on every turn). Where no registry is reachable, build an
image from this machine's Python with ``python -m prm_gym.sandbox.docker_image`` (see
:mod:`prm_gym.sandbox.docker_image`) and pass its tag as ``image``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from prm_gym.core.errors import SandboxError
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
    try:
        import docker
    except ImportError as exc:
        raise SandboxError("the docker backend needs the docker SDK: pip install 'prm-gym[docker]'.") from exc
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
                network_mode="none",
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
