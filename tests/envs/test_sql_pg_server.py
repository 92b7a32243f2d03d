"""prm/SQL-v0 on PostgreSQL for real: a server the env starts itself, a DSN, and the errors at make time.

One throwaway server serves the module (the ``host`` fixture holds it; envs made with the default
settings share it); the test of stopping on close starts its own (a second key: ``pg_bin_dir``).
Skipped where Debian's PostgreSQL server programs or psycopg are not installed.
"""

from __future__ import annotations

import decimal
import time
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import format_answer, format_tool_call
from prm_gym.envs.sql.db import SQLiteDatabase
from prm_gym.envs.sql.env import SQLEnv
from prm_gym.envs.sql.judges import gold_orders, rows_match
from prm_gym.envs.sql.tasks import generate_sql_tasks

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'prm-gym[sql-postgres]')")

from prm_gym.envs.sql.pghost import PostgresHost, acquire_host, release_host  # noqa: E402
from prm_gym.envs.sql.pgserver import find_pg_bin, process_gone  # noqa: E402
from prm_gym.envs.sql.postgres import PostgresDatabase  # noqa: E402

pytestmark = pytest.mark.xdist_group("postgres")


def _no_server_reason() -> str | None:
    try:
        find_pg_bin()
    except ConfigError as exc:
        return str(exc)
    return None


needs_server = pytest.mark.skipif(_no_server_reason() is not None, reason=f"{_no_server_reason()}")


@pytest.fixture(scope="module")
def host() -> Iterator[PostgresHost]:
    """The module's throwaway server (the one ``SQLEnv(backend="postgres")`` shares)."""
    if _no_server_reason():
        pytest.skip(str(_no_server_reason()))
    h = acquire_host()
    yield h
    release_host(h)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return generate_sql_tasks(24, 0, schemas=("shop",), dbs_per_schema=1, cache_dir=tmp_path_factory.mktemp("sqldb"))


@needs_server
def test_the_gold_is_rewarded_a_wrong_query_is_not_and_the_prompt_says_postgresql(host, tasks) -> None:
    env = gym.make("prm/SQL-v0", tasks=tasks, backend="postgres").unwrapped
    assert env._pg is host  # the module's server, not a second one
    obs, _ = env.reset(seed=0, options={"task_id": tasks[0].id})
    assert obs.startswith("PostgreSQL database") and "final PostgreSQL query" in obs
    assert env.task.meta["db_dialect"] == "postgres" and "db_path" not in env.task.meta
    obs, _, _, _, info = env.step(format_tool_call("list_tables", {}))
    assert info["tool"]["ok"] and "order_items" in obs
    _, _, term, _, info = env.step(format_answer(env.task.answer))
    assert term and info["reward_outcome"] == 1.0 and info["reward_status"] == "ok"
    assert info["reward_syntax"] == pytest.approx(0.1) and info["reward_schema"] == pytest.approx(0.1)

    env.reset(seed=0, options={"task_id": tasks[0].id})
    _, _, term, _, info = env.step(format_answer("SELECT name FROM products WHERE id < 0"))
    assert term and info["reward_outcome"] == 0.0 and info["reward_status"] == "ok"
    env.close()
    assert host.server is not None and not process_gone(host.server.pid or 0)  # still serving the module


@needs_server
def test_hostile_queries_are_the_agents_fault_and_end_within_the_deadline(host, tasks) -> None:
    env = SQLEnv(
        tasks,
        backend="postgres",
        query_timeout_s=1.0,
        max_turns=16,
        judge_kwargs={"rule/execution_match": {"timeout_s": 1.0}, "rule/sql_syntax": {"timeout_s": 1.0}},
    )
    env.reset(seed=0, options={"task_id": tasks[0].id})
    hostile = [
        "DROP TABLE customers",
        "DELETE FROM customers",
        "CREATE TEMP TABLE t (a int)",
        "SELECT pg_sleep(100)",
        "SET statement_timeout = 0; SELECT pg_sleep(100)",
        "SELECT set_config('statement_timeout', '0', false), pg_sleep(100)",
        "SELECT count(*) FROM order_items a, order_items b, order_items c, order_items d",
        "SELECT pg_read_file('/etc/passwd')",
        "COPY customers TO '/tmp/pwned'",
        "SELECT pg_terminate_backend(pg_backend_pid())",
    ]
    for sql in hostile:
        start = time.monotonic()
        obs, _, term, _, info = env.step(format_tool_call("run_query", {"sql": sql}))
        assert time.monotonic() - start < 6, sql
        assert not term and info["reward_status"] == "ok" and not info["tool"]["ok"], (sql, obs)
        assert info["reward_tool"] < 0
    # memory: each server process may map 1 GiB; before, this query held 1 GB of the server and finished
    greedy = "SELECT length(string_agg(repeat('x', 1000000), '')), length(string_agg(repeat('y', 1000000), ''))"
    obs, _, _, _, info = env.step(format_tool_call("run_query", {"sql": greedy + " FROM generate_series(1, 500)"}))
    assert "out of memory" in obs and info["reward_status"] == "ok" and not info["tool"]["ok"], obs
    start = time.monotonic()
    _, _, term, _, info = env.step(format_answer("SELECT pg_sleep(100)"))
    assert time.monotonic() - start < 10
    assert term and info["reward_status"] == "ok" and info["reward_outcome"] == 0.0
    env.close()
    db = PostgresDatabase(host.load(tasks[0].meta["db_path"]))
    assert db.query("SELECT count(*) FROM customers").rows == ((40,),)
    db.close()


def _rounded(rows: tuple[tuple[object, ...], ...]) -> tuple[tuple[object, ...], ...]:
    num = (float, decimal.Decimal)
    return tuple(tuple(round(float(v), 6) if isinstance(v, num) else v for v in r) for r in rows)  # type: ignore[arg-type]


@needs_server
def test_every_generated_gold_query_gives_the_same_rows_on_both_backends(host, tmp_path_factory) -> None:
    sqlite_tasks = generate_sql_tasks(90, 3, cache_dir=tmp_path_factory.mktemp("all"))
    env = SQLEnv(sqlite_tasks, backend="postgres")
    try:
        for lite, pg in zip(sqlite_tasks, env.tasks, strict=True):
            want = SQLiteDatabase(lite.meta["db_path"]).query(lite.answer).rows
            db = PostgresDatabase(pg.meta["db_dsn"])
            got = db.query(pg.answer).rows
            db.close()
            assert rows_match(_rounded(want), _rounded(got), ordered=gold_orders(lite.answer)), (lite.answer, pg.answer)
    finally:
        env.close()


@needs_server
def test_the_judges_parse_in_the_postgresql_dialect(host, tasks) -> None:
    env = SQLEnv(tasks, backend="postgres")
    env.reset(seed=0, options={"task_id": tasks[0].id})
    only_pg = "SELECT DISTINCT ON (city) city::text FROM customers WHERE name ILIKE '%a%' ORDER BY city"
    _, _, _, _, info = env.step(format_answer(only_pg))
    assert info["reward_status"] == "ok" and info["reward_syntax"] == pytest.approx(0.1)  # parses and runs
    env.close()


@needs_server
def test_close_stops_the_server_and_removes_its_folder(tasks) -> None:
    env = SQLEnv(tasks, backend="postgres", pg_bin_dir=str(find_pg_bin()))  # its own server (another key)
    server = env._pg.server
    assert server is not None
    pid, root = server.pid, server.root
    assert pid is not None and not process_gone(pid) and root.is_dir()
    env.reset(seed=0)
    clone = env.fork()  # a fork shares the server; closing it leaves the server up
    clone.close()
    assert not process_gone(pid)
    env.close()
    assert process_gone(pid) and not root.exists()


@needs_server
def test_a_dsn_uses_that_server_and_drops_its_role_on_close(host, tasks) -> None:
    env = SQLEnv(tasks, backend="postgres", pg_dsn=host.admin_dsn)
    assert env._pg is not host and env._pg.server is None
    role = env._pg.role
    assert f"user={role}" in env.tasks[0].meta["db_dsn"] and host.server is not None
    assert str(host.server.root) in env.tasks[0].meta["db_dsn"]
    env.reset(seed=0, options={"task_id": tasks[1].id})
    _, _, term, _, info = env.step(format_answer(env.task.answer))
    assert term and info["reward_outcome"] == 1.0 and info["reward_status"] == "ok"
    env.close()
    with psycopg.connect(host.admin_dsn) as conn:
        assert conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None


def test_missing_server_programs_fail_when_the_env_is_made(tmp_path: Path) -> None:
    (tmp_path / "initdb").write_text("not a program")  # present but not executable: still missing
    with pytest.raises(ConfigError, match=r"pg_bin_dir.*apt-get install postgresql"):
        gym.make("prm/SQL-v0", num_tasks=4, backend="postgres", pg_bin_dir=str(tmp_path))


def test_backend_arguments_are_checked_when_the_env_is_made() -> None:
    with pytest.raises(ConfigError, match="backend must be one of"):
        SQLEnv(num_tasks=4, backend="mysql")
    with pytest.raises(ConfigError, match="need backend='postgres'"):
        SQLEnv(num_tasks=4, pg_dsn="host=/nowhere")
    with pytest.raises(ConfigError, match="pg_dsn: cannot connect"):
        SQLEnv(num_tasks=4, backend="postgres", pg_dsn="host=/nonexistent-prm-dir port=1 user=x dbname=x")


@needs_server
def test_train_agent_env_kwargs_choose_the_sql_backend(host, tasks) -> None:
    """The database engine is prm/SQL-v0's own setting: it travels in --env-kwargs, not a trainer flag."""
    from prm_gym.training.cli import parse
    from prm_gym.training.run import env_factory

    cfg = parse(["--env", "prm/SQL-v0", "--env-kwargs", '{"num_tasks": 6, "backend": "postgres"}'])
    env = env_factory(cfg.env, cfg.eval_env_kwargs)()
    obs, _ = env.reset(seed=0)
    assert obs.startswith("PostgreSQL database") and env.unwrapped._pg is host
    env.close()


def test_the_trainer_has_no_sql_flags_and_the_env_checks_its_own() -> None:
    from prm_gym.training.cli import parse

    with pytest.raises(ConfigError, match=r"--sql.backend was removed.*--env-kwargs.*\"backend\": \"postgres\""):
        parse(["--env", "prm/SQL-v0", "--sql.backend", "postgres"])
    with pytest.raises(ConfigError, match=r"need backend='postgres'"):
        SQLEnv(num_tasks=2, pg_dsn="host=/x")
