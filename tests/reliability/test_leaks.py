"""Nothing left behind: every env, on every backend, made, reset, stepped and closed many times
leaves no file descriptor, thread, child process or temporary file behind.

Each test runs one warm-up cycle first, then takes the counts, runs ``cycles`` more and takes
them again; the growth allowed is zero. The warm-up takes out what a process makes once and
keeps on purpose: imported modules and their native threads, the generated search world and
its BM25 index (kept in memory and under ``~/.cache/prm-gym``), the SQL generator's databases and
their neighbours on disk (content-addressed files, one set per database; moved out of the
private temp folder below through ``PRM_SQL_CACHE`` / ``PRM_SQL_NEIGHBOURS``), the seccomp
filter and the judges' result caches (rows, bounded by bytes). The SQL judges' open databases
are NOT among them: they are process-wide but closed with the last SQL env
(:class:`prm_gym.envs.sql.suite.Suite`), and the cycles use a new task (seed) each time, so a
cache of connections that grew with the databases seen would show.

Each cycle steps actions that reach the backend: a calculator call (Math), a ``python`` run and
a graded answer (Code: the tool's sandbox and the unit-test judge's), a search (Search, in
process or through a real ``RetrievalServer``), a ``run_query`` and an answer judged on the task's
and the neighbour databases (SQL, SQLite and a throwaway PostgreSQL server).

Counted: open fds (``/proc/self/fd``), threads (``threading.active_count()`` and
``/proc/self/task``, which sees native threads too), descendant processes (psutil, zombies
included) and the files and folders under the temp folder, a private one per test
(``tempfile.tempdir`` and ``TMPDIR``) so other processes' files do not count. Counts are read
right after ``close()`` (no waiting, no ``gc.collect()``), except that the retrieval server's
per-connection handler threads, which end when the client closes its connection, get up to 2 s.

Figures: ``pytest -q -s tests/reliability/test_leaks.py`` (default cycles) and
``pytest -q -s -m slow tests/reliability/test_leaks.py`` (200 cycles; PostgreSQL 30, Docker 20);
see docs/reliability.md, "Nothing left behind".
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers the prm/* ids)

#: Cycles of the default suite for the cheap envs, and of the slow runs for all.
CYCLES = 200
#: Code env cycles in the default suite (each starts bubblewrap sandboxes: 70-200 ms a cycle).
CODE_CYCLES = 50
#: PostgreSQL cycles: each starts and stops a throwaway server (initdb, pg_ctl: about 3 s a cycle).
PG_CYCLES, PG_SLOW_CYCLES = 3, 30
#: Docker cycles (slow only): each starts containers.
DOCKER_CYCLES = 20
#: Set in the fresh process a test marked :func:`alone` runs in.
ALONE = "PRM_LEAKS_ALONE"


def alone(test: Callable[..., None]) -> Callable[..., None]:
    """Run ``test`` in a fresh pytest process that no other test has touched: the SQL judges' open
    databases are process-wide and closed with the last SQL env, so an env another test of the same
    worker left open would keep them (a leak of that test, not of this one's cycles)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        if os.environ.get(ALONE) == "1":
            test(*args, **kwargs)
            return
        node = f"{Path(__file__).resolve()}::{test.__name__}"
        cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-m", "slow or not slow", node]
        proc = subprocess.run(cmd, env={**os.environ, ALONE: "1"}, capture_output=True, text=True, timeout=900)
        print(proc.stdout[-3000:])
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]

    return run


def tool_call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@dataclass(frozen=True)
class Counts:
    fds: int
    threads: int
    tasks: int
    children: int
    temp_paths: frozenset[str]

    def row(self) -> str:
        temp = len(self.temp_paths)
        return f"fds {self.fds}, threads {self.threads} ({self.tasks} tasks), children {self.children}, temp {temp}"


def _children() -> int:
    try:
        import psutil
    except ImportError:  # /proc scan: descendants by parent pid
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        found: set[int] = set()
        frontier = {os.getpid()}
        while frontier:
            frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
            found |= frontier
        return len(found)
    return len(psutil.Process().children(recursive=True))


def counts(temp: Path) -> Counts:
    paths = frozenset(str(p.relative_to(temp)) for p in temp.rglob("*"))
    return Counts(
        fds=len(os.listdir("/proc/self/fd")),
        threads=threading.active_count(),
        tasks=len(os.listdir("/proc/self/task")),
        children=_children(),
        temp_paths=paths,
    )


@pytest.fixture()
def private_temp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private temp folder for the test (short: PostgreSQL's socket path is limited); the SQL
    on-disk caches stay where they always are."""
    from prm_gym.envs.sql.neighbours import neighbour_dir
    from prm_gym.envs.sql.tasks import default_cache_dir

    monkeypatch.setenv("PRM_SQL_CACHE", str(default_cache_dir()))
    monkeypatch.setenv("PRM_SQL_NEIGHBOURS", str(neighbour_dir()))
    root = Path(tempfile.mkdtemp(prefix="prm-leaks-", dir="/tmp"))
    root.chmod(0o1777)  # like /tmp: the throwaway PostgreSQL server runs as another user
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_cycles(
    label: str,
    make: Callable[[], gym.Env[Any, Any]],
    actions: Sequence[str],
    cycles: int,
    temp: Path,
    settle_s: float = 0.0,
) -> tuple[Counts, Counts]:
    """One warm-up cycle, then ``cycles`` cycles between two counts; asserts no growth."""

    def cycle(seed: int) -> None:
        env = make()
        try:
            env.reset(seed=seed)
            for action in actions:
                _, _, terminated, truncated, info = env.step(action)
                assert info["reward_status"] == "ok", (label, info.get("judge"))
                assert info["tool"]["failed"] == 0, (label, info["tool"])
                if terminated or truncated:
                    break
        finally:
            env.close()

    cycle(0)
    before = counts(temp)
    start = time.perf_counter()
    for i in range(1, cycles + 1):
        cycle(i)
    took = time.perf_counter() - start
    after = counts(temp)
    deadline = time.monotonic() + settle_s
    while after != before and time.monotonic() < deadline:
        time.sleep(0.05)
        after = counts(temp)
    print(f"\n[leaks] {label}: {cycles} cycles in {took:.1f} s; before: {before.row()}; after: {after.row()}")
    assert after.fds <= before.fds, (label, "fds", before.fds, after.fds, _fd_targets())
    assert after.threads <= before.threads and after.tasks <= before.tasks, (label, "threads", before, after)
    assert after.children <= before.children, (label, "child processes", before.children, after.children)
    assert after.temp_paths <= before.temp_paths, (label, "temp files", sorted(after.temp_paths - before.temp_paths))
    return before, after


def _fd_targets() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sorted(out)


# ----------------------------------------------------------------------------- Math, Search, SQL (SQLite)
def _math(n: int, temp: Path) -> None:
    run_cycles("math", lambda: gym.make("prm/Math-v0"), [tool_call("calculator", expression="12*(3+4)")], n, temp)


def _search(n: int, temp: Path) -> None:
    search = [tool_call("search", query="born")]
    run_cycles("search (in-process BM25)", lambda: gym.make("prm/Search-v0"), search, n, temp)


def _search_server(n: int, temp: Path) -> None:
    from prm_gym.envs.search.env import world_index
    from prm_gym.envs.search.index.server import RetrievalServer

    with RetrievalServer(world_index(300, 0), port=0).start() as server:
        url = server.url
        run_cycles(
            "search (retrieval server)",
            lambda: gym.make("prm/Search-v0", index=url),
            [tool_call("search", query="born")],
            n,
            temp,
            settle_s=2.0,
        )


_SQL_ACTIONS = [tool_call("run_query", sql="SELECT 1"), "<answer>SELECT 1</answer>"]


def _sql(n: int, temp: Path) -> None:
    run_cycles("sql (SQLite, 3 neighbours)", lambda: gym.make("prm/SQL-v0"), _SQL_ACTIONS, n, temp)


def test_math_leaves_nothing(private_temp: Path) -> None:
    _math(CYCLES, private_temp)


def test_search_leaves_nothing(private_temp: Path) -> None:
    _search(CYCLES, private_temp)


def test_search_through_a_retrieval_server_leaves_nothing(private_temp: Path) -> None:
    _search_server(CYCLES, private_temp)


@alone
def test_sql_sqlite_with_neighbours_leaves_nothing(private_temp: Path) -> None:
    _sql(CYCLES, private_temp)


@alone
def test_the_sql_judges_connections_close_with_the_last_env(private_temp: Path) -> None:
    """The judges' process-wide open databases (task + neighbours) stay while an SQL env is open
    and are closed by the last ``close()``; nothing is held before the first env either."""
    from prm_gym.envs.sql.judges import DATABASES

    first = gym.make("prm/SQL-v0")
    first.reset(seed=0)
    fds = len(os.listdir("/proc/self/fd"))
    second = gym.make("prm/SQL-v0")
    second.reset(seed=1)
    fresh = f"SELECT {time.time_ns()}"  # not in the judges' result caches: it runs
    second.step(f"<answer>{fresh}</answer>")
    assert len(os.listdir("/proc/self/fd")) > fds  # the verdict opened the task's database (and neighbours)
    second.close()
    assert len(os.listdir("/proc/self/fd")) > fds  # `first` is open: they stay
    first.close()
    assert len(os.listdir("/proc/self/fd")) < fds  # the last env closed them (and its own database)
    assert DATABASES.close_connections() == 0
    first.close()  # idempotent: no double release
    again = gym.make("prm/SQL-v0")
    again.reset(seed=1)
    assert again.step("<answer>SELECT 1</answer>")[4]["reward_status"] == "ok"  # reopened on demand
    again.close()


# ----------------------------------------------------------------------------- Code (bubblewrap)
def _code(n: int, temp: Path, pool: bool) -> None:
    pytest.importorskip("prm_gym.sandbox.bwrap")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make setup)")
    backend = "bwrap-pool" if pool else "bwrap"
    run_cycles(
        f"code ({backend})",
        lambda: gym.make("prm/Code-v0", sandbox=backend, judge_sandbox=backend),
        [tool_call("python", code="print(6 * 7)"), "<answer>```python\ndef f():\n    return 1\n```</answer>"],
        n,
        temp,
    )


def test_code_bwrap_leaves_nothing(private_temp: Path) -> None:
    _code(CODE_CYCLES, private_temp, pool=False)


def test_code_bwrap_pool_leaves_nothing(private_temp: Path) -> None:
    _code(CODE_CYCLES, private_temp, pool=True)


# ----------------------------------------------------------------------------- PostgreSQL
def _pg_available() -> str | None:
    from prm_gym.envs.sql.pgserver import find_pg_bin

    try:
        find_pg_bin(None)
        import psycopg  # noqa: F401
    except Exception as exc:  # ConfigError (no initdb) or ImportError
        return str(exc)
    return None


def _pg(n: int, temp: Path) -> None:
    why = _pg_available()
    if why:
        pytest.skip(f"PostgreSQL unavailable: {why}")
    make = lambda: gym.make("prm/SQL-v0", backend="postgres")  # noqa: E731
    run_cycles("sql (PostgreSQL, throwaway server)", make, _SQL_ACTIONS, n, temp)


@alone
def test_sql_postgres_leaves_nothing(private_temp: Path) -> None:
    _pg(PG_CYCLES, private_temp)


# ----------------------------------------------------------------------------- the slow runs: 200 cycles
@pytest.mark.slow
def test_code_bwrap_leaves_nothing_200(private_temp: Path) -> None:
    _code(CYCLES, private_temp, pool=False)


@pytest.mark.slow
def test_code_bwrap_pool_leaves_nothing_200(private_temp: Path) -> None:
    _code(CYCLES, private_temp, pool=True)


@pytest.mark.slow
@alone
def test_sql_postgres_leaves_nothing_many(private_temp: Path) -> None:
    _pg(PG_SLOW_CYCLES, private_temp)


@pytest.mark.slow
def test_code_docker_leaves_nothing(private_temp: Path, docker_daemon: Any) -> None:
    """Docker when a daemon answers (or a private dockerd can be started: tests/conftest.py), else skipped."""
    kwargs = docker_daemon.sandbox_kwargs
    run_cycles(
        "code (docker)",
        lambda: gym.make("prm/Code-v0", sandbox="docker", sandbox_kwargs=kwargs, judge_sandbox="bwrap"),
        [tool_call("python", code="print(6 * 7)")],
        DOCKER_CYCLES,
        private_temp,
    )
