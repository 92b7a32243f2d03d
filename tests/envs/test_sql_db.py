"""The guarded SQLite connection: read-only, time-limited, capped, clear about bad input."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from prm_gym.core.errors import InfraError, ToolError
from prm_gym.envs.sql.db import DatabaseError, SQLiteDatabase, format_result
from prm_gym.envs.sql.open import open_database


def _make_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE "café" (id INTEGER PRIMARY KEY, "naïve" TEXT, "日本" INTEGER);
        CREATE TABLE t (a INTEGER);
        """
    )
    conn.executemany('INSERT INTO "café" VALUES (?, ?, ?)', [(i, f"v{i}", i * 2) for i in range(50)])
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    conn.commit()
    conn.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


WRITES = [
    'DROP TABLE "café"',
    "DELETE FROM t",
    "UPDATE t SET a = 0",
    "INSERT INTO t VALUES (1)",
    "CREATE TABLE x (a)",
    "CREATE TEMP TABLE x (a)",
    "ATTACH DATABASE '{dir}/evil.db' AS evil",
    "VACUUM INTO '{dir}/copy.db'",
    "PRAGMA query_only = OFF",
    "PRAGMA journal_mode = WAL",
    "PRAGMA user_version = 7",
    "BEGIN",
    "REINDEX",
]


@pytest.mark.parametrize("copy", [False, True])
@pytest.mark.parametrize("stmt", WRITES)
def test_writes_are_refused_and_nothing_changes(tmp_path: Path, stmt: str, copy: bool) -> None:
    path = _make_db(tmp_path / "db.sqlite")
    before, files = _digest(path), sorted(tmp_path.iterdir())
    db = SQLiteDatabase(path, copy=copy)
    with pytest.raises(ToolError):
        db.query(stmt.format(dir=tmp_path))
    assert db.query("SELECT COUNT(*) FROM t").rows == ((100,),)
    db.close()
    assert _digest(path) == before
    assert sorted(tmp_path.iterdir()) == files


@pytest.mark.parametrize("copy", [False, True])
def test_fts3_tokenizer_cannot_plant_a_pointer(tmp_path: Path, copy: bool) -> None:
    """Two-argument fts3_tokenizer registers a tokenizer at a pointer the query gives, where SQLite is
    built with ENABLE_FTS3_TOKENIZER (Debian's is): refused, like load_extension."""
    db = SQLiteDatabase(_make_db(tmp_path / "db.sqlite"), copy=copy)
    for sql in (
        "SELECT fts3_tokenizer('simple', x'4141414141414141')",
        "SELECT fts3_tokenizer('simple')",
        "SELECT load_extension('/nonexistent')",
    ):
        with pytest.raises(ToolError, match=r"not authorized|read-only"):
            db.query(sql)
    assert db.query("SELECT COUNT(*) FROM t").rows == ((100,),)
    db.close()


def test_refusal_message_is_clear(tmp_path: Path) -> None:
    db = SQLiteDatabase(_make_db(tmp_path / "db.sqlite"))
    with pytest.raises(ToolError, match="read-only"):
        db.query("DELETE FROM t")
    with pytest.raises(ToolError, match="one SQL statement"):
        db.query("SELECT 1; SELECT 2")
    with pytest.raises(ToolError, match="syntax error"):
        db.query("SELEC a FROM t")


@pytest.mark.parametrize(
    "sql",
    [
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r",
        "SELECT COUNT(*) FROM t a, t b, t c, t d, t e",
    ],
)
def test_runaway_queries_hit_the_time_limit(tmp_path: Path, sql: str) -> None:
    db = SQLiteDatabase(_make_db(tmp_path / "db.sqlite"))
    with pytest.raises(ToolError, match="time limit"):
        db.query(sql, timeout_s=0.2)
    assert db.query("SELECT COUNT(*) FROM t", timeout_s=0.2).rows == ((100,),)


def test_row_cap_and_blob_cap(tmp_path: Path) -> None:
    db = SQLiteDatabase(_make_db(tmp_path / "db.sqlite"))
    res = db.query("SELECT a FROM t", max_rows=5)
    assert len(res.rows) == 5 and res.truncated
    assert "returned more" in format_result(res)
    assert not db.query("SELECT a FROM t", max_rows=100).truncated
    with pytest.raises(ToolError, match="too big"):
        db.query("SELECT randomblob(1000000000)")
    long = db.query("SELECT printf('%.*c', 100000, 'x')")
    assert "[... output cut]" in format_result(long, max_chars=1000, max_cell=10**6)


def test_unicode_identifiers(tmp_path: Path) -> None:
    db = SQLiteDatabase(_make_db(tmp_path / "db.sqlite"))
    assert db.tables() == ["café", "t"]
    text = db.describe("café")
    assert '"naïve" TEXT' in text and '"日本" INTEGER' in text and "v1" in text
    assert db.query('SELECT "日本" FROM "café" WHERE "naïve" = \'v3\'').rows == ((6,),)
    with pytest.raises(ToolError, match="no table named"):
        db.describe('café" ; DROP TABLE t; --')


def test_missing_and_non_sqlite_files(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="does not exist"):
        SQLiteDatabase(tmp_path / "nope.sqlite")
    bad = tmp_path / "bad.sqlite"
    bad.write_text("id,name\n1,x\n")
    with pytest.raises(DatabaseError, match="not an SQLite 3 database"):
        SQLiteDatabase(bad)
    assert issubclass(DatabaseError, InfraError)
    with pytest.raises(DatabaseError, match="names no database"):
        open_database({})


def test_closed_database_is_an_infra_error(tmp_path: Path) -> None:
    db = SQLiteDatabase(_make_db(tmp_path / "db.sqlite"))
    db.close()
    db.close()
    with pytest.raises(DatabaseError):
        db.query("SELECT 1")


def test_one_call_or_one_row_cannot_outgrow_the_bounds(tmp_path: Path) -> None:
    """An outside audit's attacks through the tool's query: 100 columns of a 9 MB blob over two rows
    held 2.3 GB (2,000 columns would need hundreds); one instr() of a 2 MB text by a 1 MB one ran 26.9 s
    past a 2 s deadline, and a 25,000-character LIKE pattern 5.1 s (inside one call the progress handler
    does not run). A tool query's values are capped at 256 KiB, results at 500 columns, LIKE patterns at
    1000 bytes, and rows are read one at a time until 64 MiB are held."""
    db = SQLiteDatabase(_make_db(tmp_path / "db.sqlite"))
    wide = "WITH z(b) AS (SELECT zeroblob({n})), k(i) AS (VALUES(1),(2),(3)) SELECT {cols} FROM z, k"
    with pytest.raises(ToolError, match="too big"):
        db.query(wide.format(n=9_000_000, cols=", ".join(["b"] * 100)), max_rows=20, timeout_s=2)
    start = time.perf_counter()
    res = db.query(wide.format(n=250_000, cols=", ".join(["b"] * 500)), max_rows=20, timeout_s=2)
    assert len(res.rows) == 1 and res.truncated  # 125 MB held: the next row is not built
    with pytest.raises(ToolError, match="too many columns"):
        db.query("SELECT " + ", ".join(["1"] * 501))
    with pytest.raises(ToolError, match="too big"):
        db.query("SELECT instr(replace(hex(zeroblob(1000000)), '0', 'a'), 'b')")
    res = db.query(
        "SELECT instr(replace(hex(zeroblob(131000)), '0', 'a'), replace(hex(zeroblob(65000)), '0', 'a') || 'b')"
    )
    assert res.rows == ((0,),)
    with pytest.raises(ToolError, match="pattern too complex"):
        db.query("SELECT 'abc' LIKE '%' || replace(hex(zeroblob(600)), '0', 'a') || 'b'")
    slow_like = (
        "SELECT replace(hex(zeroblob(131000)), '0', 'a') LIKE '%' || replace(hex(zeroblob(499)), '0', 'a') || 'b'"
    )
    assert db.query(slow_like).rows == ((0,),)  # the longest pattern over the longest text: about a second
    assert time.perf_counter() - start < 4.0  # every one of them within about its deadline
    assert db.query('SELECT "naïve" FROM "café" WHERE "naïve" LIKE \'v4%\' ORDER BY 1').rows == (
        ("v4",),
        ("v40",),
        ("v41",),
        ("v42",),
        ("v43",),
        ("v44",),
        ("v45",),
        ("v46",),
        ("v47",),
        ("v48",),
        ("v49",),
    )


def test_a_table_wider_than_the_column_cap_is_still_described_and_queried(tmp_path: Path) -> None:
    path = tmp_path / "wide.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE w (" + ", ".join(f"c{i} INTEGER" for i in range(600)) + ")")
    conn.execute("INSERT INTO w (c0, c599) VALUES (1, 2)")
    conn.commit()
    conn.close()
    db = SQLiteDatabase(path)
    assert '"c599" INTEGER' in db.describe("w") and db.query("SELECT c0, c599 FROM w").rows == ((1, 2),)
    with pytest.raises(ToolError, match="too many columns"):
        db.query("SELECT * FROM w")


def test_describe_keeps_the_columns_when_a_sample_value_is_past_the_tools_cap(tmp_path: Path) -> None:
    path = tmp_path / "big.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE doc (id INTEGER, body TEXT)")
    conn.execute("INSERT INTO doc VALUES (1, ?)", ("x" * 400_000,))
    conn.commit()
    conn.close()
    text = SQLiteDatabase(path).describe("doc")
    assert '"body" TEXT' in text and "(unavailable: " in text and "too big" in text


@pytest.mark.timeout(30)  # before: the first's end removed the second's deadline, and it ran on
def test_a_query_keeps_its_own_deadline_while_another_thread_queries(tmp_path: Path) -> None:
    """A tool call abandoned past its deadline keeps running beside the next one on the same
    connection; the deadline (the progress handler) and the length cap are the connection's, so the
    second call replaced the first's, and the first's end removed the second's: it never stopped."""
    from concurrent.futures import ThreadPoolExecutor

    db = SQLiteDatabase(_make_db(tmp_path / "db.sqlite"))
    endless = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r"

    def timed(timeout_s: float) -> float:
        start = time.perf_counter()
        with pytest.raises(ToolError, match="time limit"):
            db.query(endless, timeout_s=timeout_s)
        return time.perf_counter() - start

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(timed, 1.0)
        time.sleep(0.2)
        second = pool.submit(timed, 3.0)
        assert first.result() < 1.8  # its own deadline, not the second's
        assert second.result() > 2.5
