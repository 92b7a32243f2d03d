from __future__ import annotations

import pytest

from prm_gym.core.errors import ConfigError
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


# The Docker backend runs for real in tests/sandbox/test_docker.py (a daemon, an image built offline).
