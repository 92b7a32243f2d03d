"""The PostgreSQL backend against a real throwaway server (skipped where none is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prm_gym.core.errors import ToolError
from prm_gym.core.parsing import format_answer, format_tool_call
from prm_gym.envs.sql.env import SQLEnv

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'prm-gym[sql-postgres]')")


def _pg_bin() -> Path | None:
    for cand in [shutil.which("initdb"), *sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)]:
        if cand:
            return Path(cand).parent
    return None


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="module")
def pg_dsn() -> Iterator[str]:
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser; cannot start postgres as an unprivileged user")
    with tempfile.TemporaryDirectory(prefix="prm-pg-") as tmp:
        root = Path(tmp)
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
        data, sock = root / "data", str(root)
        run = lambda *c: subprocess.run(_as_server_user([*c]), check=True, capture_output=True, timeout=60)  # noqa: E731
        run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        run(
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-l",
            str(root / "log"),
            "-o",
            f"-k {sock} -c listen_addresses='' -c fsync=off",
            "start",
        )
        try:
            with psycopg.connect(f"host={sock} dbname=postgres user=postgres", autocommit=True) as conn:
                conn.execute('CREATE TABLE pet (id int PRIMARY KEY, name text, "größe" int)')
                conn.execute("INSERT INTO pet VALUES (1, 'Rex', 30), (2, 'Tom', 4), (3, 'Kit', 5)")
                conn.execute("CREATE ROLE agent LOGIN")
                conn.execute("GRANT SELECT ON pet TO agent")
            yield f"host={sock} dbname=postgres user=agent"
        finally:
            subprocess.run(
                _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                capture_output=True,
                timeout=60,
            )


def test_postgres_episode_is_read_only_and_time_limited(pg_dsn: str) -> None:
    from prm_gym.envs.sql.postgres import PostgresDatabase

    db = PostgresDatabase(pg_dsn)
    assert db.tables() == ["pet"] and '"größe" integer' in db.describe("pet")
    assert db.query('SELECT name FROM pet WHERE "größe" > 4 ORDER BY id').rows == (("Rex",), ("Kit",))
    for stmt in ("DROP TABLE pet", "DELETE FROM pet", "CREATE TABLE x (a int)", "UPDATE pet SET name = 'x'"):
        with pytest.raises(ToolError, match="read-only"):
            db.query(stmt)
    with pytest.raises(ToolError, match="time limit"):
        db.query("SELECT pg_sleep(5)", timeout_s=0.2)
    with pytest.raises(ToolError, match="syntax"):
        db.query("SELEC 1")
    assert db.query("SELECT COUNT(*) FROM pet").rows == ((3,),)
    db.close()

    task = {
        "id": "p",
        "prompt": "Big pets?",
        "answer": 'SELECT name FROM pet WHERE "größe" > 4',
        "meta": {"db_dsn": pg_dsn, "db_id": "pets"},
    }
    env = SQLEnv([task])
    obs, _ = env.reset(seed=0)
    assert "pet" in obs
    _, _, _, _, info = env.step(format_tool_call("run_query", {"sql": "DROP TABLE pet"}))
    assert info["reward_tool"] < 0 and info["reward_status"] == "ok"
    _, reward, term, _, info = env.step(format_answer("SELECT name FROM pet WHERE id <> 2"))
    assert term and info["reward_outcome"] == 1.0 and info["reward_status"] == "ok"
    env.close()


def test_ending_its_own_session_is_the_agents_error_not_infra(pg_dsn: str) -> None:
    from prm_gym.envs.sql.postgres import PostgresDatabase

    db = PostgresDatabase(pg_dsn)
    with pytest.raises(ToolError):
        db.query("SELECT pg_terminate_backend(pg_backend_pid())")
    assert db.query("SELECT COUNT(*) FROM pet").rows == ((3,),)  # reconnected
    db.close()


def test_a_smuggled_second_statement_cannot_lift_the_time_limit(pg_dsn: str) -> None:
    from prm_gym.envs.sql.postgres import PostgresDatabase

    db = PostgresDatabase(pg_dsn)
    start = time.monotonic()
    for sql in ("SET statement_timeout = 0; SELECT pg_sleep(30)", "SELECT 1; SELECT pg_sleep(30)"):
        with pytest.raises(ToolError):
            db.query(sql, timeout_s=0.5)
    assert time.monotonic() - start < 5
    assert db.query("SELECT COUNT(*) FROM pet").rows == ((3,),)
    db.close()


def test_only_the_rows_asked_for_reach_the_client(pg_dsn: str) -> None:
    from prm_gym.envs.sql.postgres import PostgresDatabase

    db = PostgresDatabase(pg_dsn)
    start = time.monotonic()
    res = db.query("SELECT generate_series(1, 200000000) AS g", max_rows=5, timeout_s=30)
    assert res.truncated and res.rows == ((1,), (2,), (3,), (4,), (5,)) and time.monotonic() - start < 5
    db.close()


def test_a_query_that_breaks_its_transaction_leaves_the_connection_usable(pg_dsn: str) -> None:
    """A query over the role's temp_file_limit failed in the server, then its ROLLBACK failed too: the
    connection stayed in an aborted transaction, the ToolError was replaced by psycopg's error, and
    every later query on it (a judge's gold query included) failed, scoring a right answer 0."""
    from prm_gym.envs.sql.postgres import PostgresDatabase

    admin = pg_dsn.replace("user=agent", "user=postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("ALTER ROLE agent SET temp_file_limit = '1MB'")
    try:
        db = PostgresDatabase(pg_dsn)
        for _ in range(2):
            with pytest.raises(ToolError):
                db.query("SELECT repeat('x', 1000000) FROM generate_series(1, 12)", max_rows=1_000_000)
            assert db.query("SELECT name FROM pet ORDER BY id").rows == (("Rex",), ("Tom",), ("Kit",))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("ALTER ROLE agent RESET temp_file_limit")
