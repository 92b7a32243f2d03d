"""Shared fixtures: the tiny in-process model and tokenizer (loaded once per session), and a Docker
daemon with the sandbox image for the Docker tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

GPU_DRY_RUN = os.environ.get("PRM_GPU_DRY_RUN") == "1"
"""``make test-gpu-dry``: the ``gpu`` tests run on the CPU (gloo for NCCL), so their code is checked
on a machine without a GPU before one is at hand."""


@pytest.fixture()
def gpu_device() -> str:
    """The device of a ``gpu`` test: ``cuda``, or ``cpu`` under ``PRM_GPU_DRY_RUN=1``; skips without either."""
    import torch

    if GPU_DRY_RUN:
        return "cpu"
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (PRM_GPU_DRY_RUN=1 runs it on the CPU)")
    return "cuda"


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Any:
    from prm_gym.core.models import tiny_tokenizer as make

    return make()


@pytest.fixture(scope="session")
def tiny_policy() -> Any:
    from prm_gym.agents.hf import HFPolicy

    return HFPolicy.from_id("hf:tiny", seed=0)


@dataclass(frozen=True)
class DockerDaemon:
    """A Docker daemon the tests may use and the sandbox image on it (``DockerSandbox`` arguments)."""

    base_url: str | None
    image: str

    @property
    def sandbox_kwargs(self) -> dict[str, Any]:
        return {"image": self.image, "base_url": self.base_url}


def _start_dockerd(root: Path) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Start a private dockerd under ``root`` (no bridge, no iptables: no registry is needed);
    the process and its socket URL, or None and why it could not start."""
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        return None, "dockerd is not installed (apt-get install docker.io; make setup does it where apt exists)"
    if os.geteuid() != 0:
        return None, "no Docker daemon answers, and starting dockerd needs root"
    url = f"unix://{root}/docker.sock"
    cmd = [dockerd, "--bridge=none", "--iptables=false", "--ip-masq=false", "-H", url]
    cmd += ["--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "--pidfile", str(root / "pid")]
    log = (root / "dockerd.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    from prm_gym.core.errors import SandboxError
    from prm_gym.sandbox.docker import docker_client

    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            docker_client(url).close()
            return proc, url
        except SandboxError:
            time.sleep(0.5)
    _stop(proc)
    tail = (root / "dockerd.log").read_text(errors="replace").strip().splitlines()[-3:]
    return None, f"dockerd did not start within 60 s (exit {proc.returncode}): {' | '.join(tail)}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[DockerDaemon]:
    """The daemon DOCKER_HOST or the default socket names, else a private ``dockerd`` started for
    the session (and stopped after it), with the sandbox image built from this machine's Python
    (``prm_gym.sandbox.docker_image``). Skipped, with the reason, where neither can be had."""
    pytest.importorskip("docker", reason="the docker SDK is not installed (pip install 'prm-gym[docker]')")
    from prm_gym.core.errors import SandboxError
    from prm_gym.sandbox.docker import docker_client
    from prm_gym.sandbox.docker_image import build_python_image

    proc, root, url = None, None, None
    try:
        client = docker_client()
    except SandboxError:
        root = Path(tempfile.mkdtemp(prefix="prm-dockerd-", dir="/tmp"))  # short: socket paths are limited
        proc, url_or_reason = _start_dockerd(root)
        if proc is None:
            shutil.rmtree(root, ignore_errors=True)
            pytest.skip(f"Docker unavailable: {url_or_reason}")
        url = url_or_reason
        client = docker_client(url)
    try:
        image = build_python_image(client)
        client.close()
        yield DockerDaemon(url, image)
    finally:
        if proc is not None:
            _stop(proc)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
