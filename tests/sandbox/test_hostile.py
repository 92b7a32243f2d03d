"""Hostile programs are contained every time, and the host is unaffected."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from prm_gym.sandbox.protocol import make_sandbox
from prm_gym.sandbox.types import Limits

PROJECT = Path(__file__).resolve().parents[2]


#: Docker runs need a daemon and the sandbox image (tests/conftest.py) and a container each: slow.
DOCKER = pytest.param("docker", marks=[pytest.mark.slow, pytest.mark.xdist_group("docker")])


@pytest.fixture(scope="module", params=["bwrap", "bwrap-pool", DOCKER])
def box(request):
    kw = request.getfixturevalue("docker_daemon").sandbox_kwargs if request.param == "docker" else {}
    with make_sandbox(request.param, limits=Limits(timeout_s=3, memory_mb=512, processes=32), **kw) as sb:
        yield sb


@pytest.fixture(scope="module")
def slack(box) -> float:
    """Seconds a backend needs beyond a program's own time: 0 for bubblewrap; for Docker, the cost
    of creating, starting and removing a container (measured on a trivial program, twice the
    slower of two), which its deadline, counted from the container's start, does not cover."""
    if box.name != "docker":
        return 0.0
    return 2 * max(box.run("print(1)").duration_s for _ in range(2))


def test_no_network(box):
    code = (
        "import socket\n"
        "for host, port in [('1.1.1.1', 53), ('127.0.0.1', 22), ('pypi.org', 443)]:\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=1); print('CONNECTED')\n"
        "    except OSError as e: print('blocked', type(e).__name__)\n"
    )
    r = box.run(code)
    assert "CONNECTED" not in r.stdout and r.stdout.count("blocked") == 3


def test_cannot_read_outside_the_work_dir(box, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    targets = [str(secret), str(PROJECT / "pyproject.toml"), str(Path.home() / ".bashrc"), "/root/.ssh"]
    code = (
        "import os\n"
        f"for p in {targets!r}:\n"
        "    try:\n"
        "        print(open(p).read()[:20] if os.path.isfile(p) else os.listdir(p))\n"
        "    except OSError as e: print('denied', type(e).__name__)\n"
    )
    r = box.run(code)
    assert "TOPSECRET" not in r.stdout and "prm-gym" not in r.stdout
    assert r.stdout.count("denied") == len(targets), r.stdout


def test_cannot_write_to_the_root(box):
    code = (
        "for p in ['/etc/pwned', '/usr/pwned', '/pwned', '/root/pwned']:\n"
        "    try:\n"
        "        open(p, 'w').write('x'); print('WROTE', p)\n"
        "    except OSError as e: print('denied', type(e).__name__)\n"
    )
    r = box.run(code)
    assert "WROTE" not in r.stdout or (r.stdout.count("WROTE") == 1 and "/root/pwned" in r.stdout)
    assert not any(Path(p).exists() for p in ["/etc/pwned", "/usr/pwned", "/pwned", "/root/pwned"])


def test_fork_bomb_is_contained(box, slack):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    start = time.perf_counter()
    r = box.run(code, timeout=2)
    assert r.timed_out and time.perf_counter() - start < 10 + slack
    assert box.run("print('alive')").stdout == "alive\n"


def test_memory_bomb_is_contained(box):
    r = box.run("x = []\nwhile True:\n    x.append(bytearray(50 * 1024 * 1024))\n")
    assert not r.ok and "MemoryError" in r.stderr


def test_infinite_loop_and_long_sleep_time_out(box, slack):
    for code in ["while True: pass", "import time; time.sleep(60)"]:
        start = time.perf_counter()
        r = box.run(code, timeout=1)
        assert r.timed_out and r.exit_code == -1 and time.perf_counter() - start < 4 + slack


def test_huge_output_is_capped(box):
    r = box.run("import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n", timeout=2)
    assert r.truncated and len(r.stdout) < 70_000
    r = box.run("open('big', 'w').write('z' * (64 << 20))")
    assert not r.ok  # RLIMIT_FSIZE / tmpfs size


def test_killing_the_parent_leaves_the_host_alone(box):
    code = (
        "import os\n"
        "for pid in (os.getppid(), 1, -1):\n"
        "    try:\n"
        "        os.kill(pid, 9); print('signalled', pid)\n"
        "    except OSError as e: print('denied', type(e).__name__)\n"
        "os.kill(os.getpid(), 9)\nprint('survived')\n"
    )
    r = box.run(code)
    assert r.exit_code == 137 and "survived" not in r.stdout and "signalled" not in r.stdout
    assert os.getppid() > 1  # this test process still has its parent
    assert box.run("print('alive')").ok


def test_background_process_dies_with_the_run(box, slack):
    code = (
        "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 5; echo late'], start_new_session=True)\nprint('done')"
    )
    start = time.perf_counter()
    r = box.run(code)
    assert r.stdout == "done\n" and time.perf_counter() - start < 3 + slack
