from __future__ import annotations

import pytest

from prm_gym.core.errors import ConfigError, SandboxError
from prm_gym.sandbox.docker import docker_client
from prm_gym.sandbox.process import UnsandboxedWarning
from prm_gym.sandbox.protocol import make_sandbox
from prm_gym.sandbox.types import Limits


def test_process_backend_only_by_name_and_warns_loudly(capfd):
    with pytest.warns(UnsandboxedWarning):
        sb = make_sandbox("process", limits=Limits(timeout_s=2))
    assert "WITHOUT ISOLATION" in capfd.readouterr().err
    with sb:
        assert sb.run("print(6 * 7)").stdout == "42\n"
        assert sb.run("import time; time.sleep(5)", timeout=0.5).timed_out


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="bwrap"):
        make_sandbox("chroot")


def _docker_reason() -> str | None:
    try:
        docker_client()
    except SandboxError as exc:
        return str(exc)
    return None


@pytest.mark.skipif(_docker_reason() is not None, reason=f"Docker unavailable: {_docker_reason()}")
def test_docker_backend_runs_and_isolates():
    with make_sandbox("docker", limits=Limits(timeout_s=20)) as sb:
        assert sb.run("print(1)").stdout == "1\n"
        code = "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('C')\n"
        r = sb.run(code + "except OSError: print('blocked')")
        assert r.stdout == "blocked\n"
