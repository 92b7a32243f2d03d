"""Servers die with their owner: a real owner process starts a real PostgreSQL, a real retrieval
server (3 processes) and a warm pool of bubblewrap workers, is killed with SIGTERM or SIGKILL,
and within :data:`DEADLINE_S` every server process is gone and every folder removed. A folder
whose owner and watchdog were both killed is reaped by the next start."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.envs.search.index import write_corpus
from prm_gym.envs.search.tasks import generate_world, world_passages
from prm_gym.sandbox.lifetime import GRACE_S, POLL_S, Lease, reap_stale, start_time

#: Seconds after the owner's death by which its servers must be gone and folders removed.
DEADLINE_S = POLL_S + GRACE_S + 5.0
ROOT = Path(__file__).resolve().parents[2]


def _have_pg() -> bool:
    from prm_gym.envs.sql.pgserver import find_pg_bin

    try:
        find_pg_bin()
    except ConfigError:
        return False
    return True


def _have_bwrap() -> bool:
    from prm_gym.sandbox.bwrap import BwrapSandbox

    try:
        BwrapSandbox().run("print(1)")
    except Exception:
        return False
    return True


OWNER = textwrap.dedent(
    """
    import json, sys, time
    from prm_gym.envs.search.index.process import RetrievalProcess
    out = {"pids": [], "folders": [], "watchdogs": []}
    retrieval = RetrievalProcess(sys.argv[1], corpus=True, workers=3)
    out["folders"].append(str(retrieval.lease.root))
    out["watchdogs"].append(retrieval.lease.watchdog.pid)
    out["pids"].append(retrieval.pid)
    out["group"] = retrieval.pid
    if sys.argv[2] == "1":
        from prm_gym.envs.sql.pgserver import PostgresServer
        pg = PostgresServer()
        out["folders"].append(str(pg.root))
        out["watchdogs"].append(pg.lease.watchdog.pid)
        out["pids"].append(pg.pid)
    if sys.argv[3] == "1":
        from prm_gym.sandbox.bwrap import BwrapSandbox
        from prm_gym.sandbox.pool import WarmPool
        pool = WarmPool(BwrapSandbox(), size=2)
        workers = [pool.acquire(), pool.acquire()]
        out["pids"] += [w.proc.pid for w in workers]
    print(json.dumps(out), flush=True)
    time.sleep(600)
    """
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(world_passages(generate_world(30, seed=1)), tmp_path_factory.mktemp("c") / "corpus.jsonl")


def _start_owner(corpus: Path, tmpdir: str | None = None) -> tuple[subprocess.Popen[str], dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"TMPDIR": tmpdir} if tmpdir else {})}
    args = [str(corpus), "1" if _have_pg() else "0", "1" if _have_bwrap() else "0"]
    proc = subprocess.Popen([sys.executable, "-c", OWNER, *args], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the owner died before starting its servers (exit {proc.wait()})"
    return proc, json.loads(line)


def _group_members(pgid: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def _wait_all_gone(pids: list[int], folders: list[str], deadline_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        if all(start_time(p) is None for p in pids) and not any(Path(f).exists() for f in folders):
            return time.monotonic() - start
        time.sleep(0.05)
    alive = [p for p in pids if start_time(p) is not None]
    left = [f for f in folders if Path(f).exists()]
    raise AssertionError(f"after {deadline_s:.1f} s still running: {alive}; folders left: {left}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_servers_and_folders_go_when_the_owner_is_killed(corpus: Path, sig: int) -> None:
    owner, started = _start_owner(corpus)
    pids = [int(p) for p in started["pids"]]  # type: ignore[attr-defined]
    folders = list(started["folders"])  # type: ignore[call-overload]
    workers = _group_members(int(started["group"]))  # type: ignore[call-overload]
    assert len(workers) == 3, workers  # the retrieval server and its 2 forked workers
    assert all(start_time(p) is not None for p in pids) and all(Path(f).is_dir() for f in folders)
    owner.send_signal(sig)
    owner.wait(10)
    took = _wait_all_gone(pids + workers + list(started["watchdogs"]), folders, DEADLINE_S)  # type: ignore[call-overload]
    print(f"{signal.Signals(sig).name}: all servers gone and folders removed {took:.2f} s after the owner died")


def test_a_lease_released_by_its_owner_leaves_nothing(tmp_path: Path) -> None:
    lease = Lease("prm-test-", tmp_path)
    server = subprocess.Popen(["sleep", "600"])
    lease.track(pid=server.pid)
    lease.release()
    assert server.wait(GRACE_S + 2) == -signal.SIGTERM
    assert not lease.root.exists() and lease.watchdog.poll() is not None


def test_a_folder_left_by_a_dead_owner_and_watchdog_is_reaped_at_the_next_start(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys, time; from prm_gym.sandbox.lifetime import Lease\n"
        f"l = Lease('prm-test-', {str(tmp_path)!r}); s = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "l.track(pid=s.pid); print(l.root, l.watchdog.pid, s.pid, flush=True); time.sleep(600)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert owner.stdout is not None
    root, watchdog, server = owner.stdout.readline().split()
    os.kill(int(watchdog), signal.SIGKILL)  # the machine lost both: nothing cleans up at the time
    owner.kill()
    owner.wait()
    time.sleep(2 * POLL_S)
    assert Path(root).is_dir() and start_time(int(server)) is not None
    assert reap_stale("prm-test-", tmp_path) == [Path(root)]  # what Lease() (every server start) runs first
    assert not Path(root).exists() and start_time(int(server)) is None


@pytest.mark.skipif(not _have_pg(), reason="PostgreSQL server programs are not installed")
def test_a_postgres_left_by_a_killed_owner_is_reaped_by_the_next_server(corpus: Path, private_tmp: str) -> None:
    from prm_gym.envs.sql.pgserver import PostgresServer

    private = private_tmp
    owner, started = _start_owner(corpus, private)
    for watchdog in started["watchdogs"]:  # type: ignore[attr-defined]
        os.kill(int(watchdog), signal.SIGKILL)
    owner.kill()
    owner.wait()
    postmaster, pg_root = int(started["pids"][1]), Path(started["folders"][1])  # type: ignore[index]
    time.sleep(2 * POLL_S)
    assert start_time(postmaster) is not None and pg_root.is_dir()  # left behind, as before this fix
    server = PostgresServer()
    try:
        assert start_time(postmaster) is None and not pg_root.exists()
    finally:
        server.stop()
    reap_stale("prm-retrieval-", private)  # the retrieval server of that owner too


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private temporary folder (short: a server's socket lives in it). A PostgreSQL started by
    a test in another xdist worker reaps stale folders under /tmp, which would take a test's
    deliberate orphan away before the test checks that it was left behind."""
    private = tempfile.mkdtemp(prefix="pglt-", dir="/tmp")
    os.chmod(private, 0o1777)  # like /tmp: the server may run as the postgres user
    monkeypatch.setattr(tempfile, "tempdir", private)
    yield private
    reap_stale("prm-pg-", private)
    reap_stale("prm-retrieval-", private)
    shutil.rmtree(private, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    reap_stale("prm-retrieval-")
