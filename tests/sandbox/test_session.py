"""Interactive sessions: a program the host talks to line by line, under the host's deadlines."""

from __future__ import annotations

import time

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.rewards.unit_tests import run_tests
from prm_gym.sandbox.protocol import make_sandbox
from prm_gym.sandbox.session import Read
from prm_gym.sandbox.testing import FakeSandbox
from prm_gym.sandbox.types import Limits

ECHO = "import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)\n"
SLEEPER = "import time\ntime.sleep(30)\n"


@pytest.mark.parametrize("backend", ["bwrap", "bwrap-pool"])
def test_two_sessions_talk_and_time_out(backend):
    with make_sandbox(backend, limits=Limits(timeout_s=5)) as sb:
        echo, sleeper = sb.sessions([({"e.py": ECHO}, "e.py", 5.0), ({"s.py": SLEEPER}, "s.py", 5.0)])
        with echo, sleeper:
            deadline = time.monotonic() + 5
            for word in ("one", "two"):
                assert echo.send(word.encode() + b"\n", deadline)
                assert echo.read_line(deadline, 100) == (Read.LINE, word.upper().encode())
            start = time.monotonic()
            assert sleeper.read_line(time.monotonic() + 0.3, 100)[0] is Read.TIMEOUT
            assert time.monotonic() - start < 1.0
            assert echo.send(b"x" * 500 + b"\n", deadline)
            assert echo.read_line(deadline, 100)[0] is Read.OVERFLOW


def test_unit_tests_need_a_sandbox_with_sessions():
    meta = {"entry_point": "f", "cases": ["assert f() == 1"]}
    with pytest.raises(ConfigError, match="judge_sandbox"):
        run_tests(FakeSandbox(), "def f():\n    return 1\n", meta, 3.0)
