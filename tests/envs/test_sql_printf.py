"""SQLite's printf without the loop no deadline stops (prm_gym.envs.sql.printf): the same answers as
the built-in, and a width or precision over the length limit answered at once."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from prm_gym.envs.sql import printf
from prm_gym.envs.sql.db import SQLiteDatabase

LIMIT = 1_000_000
Pair = tuple[sqlite3.Connection, sqlite3.Connection]

FORMATS = [
    ("%5.2f|%-8s|%d|%x|%q|%Q|%%|%.*c", 3.14159, "ab", 42, 255, "it's", None, 3, "z"),
    ("%s-%d", "a", 7),
    ("%.*c", 3.7, "x"),  # a real precision is truncated
    ("%.*c", "3e1", "x"),  # text: its integer prefix
    ("%.*c", -3, "x"),  # the absolute value
    ("%*d|", -6, 1),  # a negative width justifies left
    ("%!.3c", "é"),
    ("%s", b"AB"),
    ("%d", 9223372036854775807),
    ("%.3c",),  # missing arguments read as nothing
    ("%w %z %c %y", "a", "b", "c"),  # an unknown conversion stops the format
    (12,),  # a format that is not text
    (None,),
    ("%*d", 999_999, 1),  # under the limit: SQLite's own answer
    ("%*d", 1_000_001, 1),  # over it: NULL, as SQLite answers
    ("%.1000001c", "x"),
    ("%.*c", 1e300, "x"),  # a C int cast: 1e300 clamps to 2**63 - 1, whose low 32 bits are -1
    ("%.*c", 4294967297, "x"),  # low 32 bits: 1
    ("%.4294967297c", "x"),  # literal digits masked to 31 bits
    ("%*%|%.*c", 5, 3, "x"),  # '*' before %% takes its argument
    ("%n%.*c", 3, "x"),  # %n takes none
    ("%.*c", -2147483648, "x"),  # INT_MIN: no precision
    ("%5.3c|%-4c|", "x", "y"),
]


@pytest.fixture
def pair() -> Pair:
    plain, guarded = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    for conn in (plain, guarded):
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
    printf.install(guarded, LIMIT)
    return plain, guarded


@pytest.mark.parametrize("args", FORMATS, ids=[repr(a[0])[:20] for a in FORMATS])
@pytest.mark.parametrize("name", ["printf", "format"])
def test_answers_as_the_builtin_does(pair: Pair, args: tuple[object, ...], name: str) -> None:
    plain, guarded = pair
    sql = f"SELECT {name}({', '.join('?' * len(args))})"
    assert guarded.execute(sql, args).fetchone() == plain.execute(sql, args).fetchone()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT printf('%.*c', 2000000000, 'x')",
        "SELECT printf('%.2000000000c', 'x')",
        "SELECT format('%.*c', '2000000000 rows', 'x')",
        "SELECT printf(CAST('%.2000000000c' AS BLOB), 'x')",  # a blob format is read as its bytes
        "SELECT printf('%*%%.*c', 5, 2000000000, 'x')",
        "SELECT printf('%n%.*c', 2000000000, 'x')",
        "SELECT printf(replace(hex(zeroblob(2000)), '00', '%.999999c'), 'x')",  # many, each under the limit
        "SELECT printf('%d%.*c', 1, 2000000000, 'x')",  # the star after another conversion's value
    ],
)
def test_a_width_over_the_limit_is_null_at_once(pair: Pair, sql: str) -> None:
    """Before SQLite 3.42 the built-in took 6-9 s on the first of these, past any progress handler."""
    _, guarded = pair
    t0 = time.perf_counter()
    assert guarded.execute(sql).fetchone() == (None,)
    assert time.perf_counter() - t0 < 1.0


def test_the_parse_reads_stars_in_argument_order() -> None:
    assert printf.too_wide("%d %.*c", (5, 2_000_000, "x"), LIMIT)
    assert not printf.too_wide("%d %.*c", (2_000_000, 5, "x"), LIMIT)  # the big number is a value
    assert not printf.too_wide("%% %.*c", (5, "x"), LIMIT)  # %% takes no argument
    assert printf.too_wide(b"%.2000000c", (), LIMIT)
    assert printf.too_wide("%.600000c%.600000c", ("x", "y"), LIMIT)  # together over the limit
    assert not printf.too_wide("%n%n%5d", (1,), LIMIT) and printf.output_floor("%n%5d|%y%9d", (1, 2)) == 5


def test_the_env_connection_answers_the_attack_within_its_deadline(tmp_path: Path) -> None:
    """Through the SQL env's guarded connection (installed where the linked SQLite needs it)."""
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (a)")
    conn.close()
    db = SQLiteDatabase(path)
    t0 = time.perf_counter()
    rows = db.query("SELECT printf('%.*c', 2000000000, 'x')", timeout_s=2.0).rows
    assert rows == ((None,),) and time.perf_counter() - t0 < 2.0
    assert db.query("SELECT printf('%05.1f', 2.5)").rows == (("002.5",),)
