"""SQL errors are classified by what failed, never by text the agent's SQL controls.

An agent whose query quotes an infrastructure message (``"unable to open"``, ``malformed``,
``not a database``) or raises an error whose text says so (``json('{')`` says "malformed JSON")
gets its own error back and is scored; only a database that really is missing or broken is
``infra_error``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from prm_gym.core.errors import ToolError
from prm_gym.core.parsing import format_answer, format_tool_call
from prm_gym.envs.sql.db import DatabaseError, SQLiteDatabase
from prm_gym.envs.sql.env import SQLEnv

SPOOFS = [
    'SELECT * FROM "unable to open"',
    "SELECT json('{')",
    'SELECT * FROM "database disk image is malformed"',
    'SELECT * FROM "file is not a database"',
    'SELECT "disk I/O error"(a) FROM t',
    'SELECT * FROM "Cannot operate on a closed database"',
]


def _make_db(path: Path, rows: int = 2000) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, "x" * 200) for i in range(rows)])
    conn.commit()
    conn.close()
    return path


def _env(db: Path) -> SQLEnv:
    tasks = [{"id": "a", "prompt": "How many rows?", "answer": "SELECT COUNT(*) FROM t", "meta": {"db_path": str(db)}}]
    return SQLEnv(tasks)


@pytest.mark.parametrize("copy", [False, True])
@pytest.mark.parametrize("sql", SPOOFS)
def test_spoofed_infra_messages_are_the_agents_error(tmp_path, sql, copy):
    db = SQLiteDatabase(_make_db(tmp_path / "db.sqlite", rows=10), copy=copy)
    with pytest.raises(ToolError):
        db.query(sql)
    db.close()


@pytest.mark.parametrize("sql", SPOOFS[:2])
def test_spoofs_as_tool_call_and_as_answer_are_scored_not_excluded(tmp_path, sql):
    env = _env(_make_db(tmp_path / "db.sqlite", rows=10))
    env.reset(seed=0)
    obs, _, _, _, info = env.step(format_tool_call("run_query", {"sql": sql}))
    assert info["reward_status"] == "ok" and not info["tool"]["ok"] and info["reward_tool"] < 0, info
    _, _, term, _, info = env.step(format_answer(sql))
    assert term and info["reward_status"] == "ok" and info["reward_outcome"] == 0.0, info
    env.close()


def _corrupt_pages(path: Path) -> None:
    """Overwrite every page after the first with garbage (the header and schema page stay)."""
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.seek(4096)
        fh.write(b"\xa5" * (size - 4096))


def test_a_corrupt_database_is_infra_error(tmp_path):
    path = _make_db(tmp_path / "db.sqlite")
    db = SQLiteDatabase(path)
    _corrupt_pages(path)
    with pytest.raises(DatabaseError, match=r"SQLITE_CORRUPT|SQLITE_NOTADB"):
        db.query("SELECT sum(a) FROM t")
    db.close()
    env = _env(path)
    env.reset(seed=0)
    _, _, _, _, info = env.step(format_tool_call("run_query", {"sql": "SELECT sum(a) FROM t"}))
    assert info["reward_status"] == "infra_error" and info["reward_tool"] == 0.0
    env.close()


def test_a_database_overwritten_after_opening_is_infra_error(tmp_path):
    path = _make_db(tmp_path / "db.sqlite")
    db = SQLiteDatabase(path)
    path.write_bytes(b"\x00" * 8192)
    with pytest.raises(DatabaseError):
        db.query("SELECT sum(a) FROM t")
    db.close()


def test_a_missing_database_is_infra_error(tmp_path):
    path = _make_db(tmp_path / "db.sqlite")
    env = _env(path)
    path.unlink()
    env.reset(seed=0)
    _, _, _, _, info = env.step(format_tool_call("run_query", {"sql": 'SELECT * FROM "unable to open"'}))
    assert info["reward_status"] == "infra_error"
    env.close()
