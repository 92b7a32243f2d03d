"""Neighbour databases for test-suite execution match, in the spirit of Zhong et al. (2020).

A query matched against the gold on one database can be right by accident, or by forgery: an
agent that saw the answer's rows through ``run_query`` can submit ``SELECT 'a' UNION ALL
SELECT 'b'`` and match. Spider's test-suite accuracy compares the two queries on several
databases of the same schema instead; only a query that computes the answer matches on all.

:func:`neighbours` gives ``count`` such databases for one SQLite file: perturbed copies with the
same schema (tables, indexes and views as declared) and other contents. For each table, and
deterministically from the database's content (the same file always gets the same neighbours):

* rows are sampled: each kept with probability ``1 - DROP``, and a table longer than
  :data:`MAX_TABLE_ROWS` is sampled down to about that many (a neighbour stays small however
  large the task's database is, so running a query on it is cheap);
* in every column that is not a key (declared primary or foreign key, referenced by one, or
  named ``...id``), a random subset of about ``SWAP`` of the rows trade their values among
  themselves (a permutation: the column keeps its values and its uniqueness, rows get other
  combinations); a number moves by up to 20% (integers stay integers, non-negative numbers stay
  non-negative; a column whose values are distinct stays so);
* rows are inserted in a shuffled order; a row that breaks a declared constraint is left out.

Triggers and virtual tables are not copied. A gold query that fails on a neighbour (it uses what
was not copied) leaves that neighbour out of its task's comparison; the task's own database
always counts.

Neighbours are built once per database and kept on disk (:func:`neighbour_dir`), named by the
source's SHA-256 and :data:`VERSION`, written to a temporary file and renamed into place, so
processes and threads share them safely.
"""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from prm_gym.envs.sql.db import check_sqlite_file, quote_ident

#: Bumped whenever the perturbation changes, so stale neighbours are not reused.
VERSION = 1
#: Fraction of rows a neighbour leaves out.
DROP = 0.2
#: Fraction of a non-key column's rows whose values are permuted among themselves.
SWAP = 0.4
#: Fraction of numeric non-key values moved by up to 20%.
JITTER = 0.3
#: The most rows a neighbour keeps of one table (a longer table is sampled down to about this).
MAX_TABLE_ROWS = 1000

_digests: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def neighbour_dir() -> Path:
    """Where neighbours live: ``$PRM_SQL_NEIGHBOURS`` or a per-user temp folder."""
    env = os.environ.get("PRM_SQL_NEIGHBOURS")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"prm-gym-sql-neighbours-{os.getuid()}"


def digest(path: Path) -> str:
    """SHA-256 of the file's bytes, remembered per (path, size, mtime) for the process."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _lock:
        hit = _digests.get(key)
    if hit is None:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        hit = h.hexdigest()
        with _lock:
            _digests[key] = hit
    return hit


def neighbours(db_path: str | Path, count: int) -> list[Path]:
    """The paths of ``count`` neighbour databases of the SQLite file ``db_path``, built if needed.

    Raises:
        DatabaseError: ``db_path`` is missing or not an SQLite database.
    """
    src = check_sqlite_file(db_path)
    if count <= 0:
        return []
    name = digest(src)[:32]
    folder = neighbour_dir()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k in range(count):
        path = folder / f"{name}-{k}-v{VERSION}.sqlite"
        if not path.is_file():
            _build_atomically(src, path, random.Random(f"{name}/{k}/{VERSION}"))
        out.append(path)
    return out


def _build_atomically(src: Path, dst: Path, rng: random.Random) -> None:
    fd, tmp = tempfile.mkstemp(dir=dst.parent, suffix=".tmp")
    os.close(fd)
    try:
        build_neighbour(src, Path(tmp), rng)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build_neighbour(src: Path, dst: Path, rng: random.Random) -> None:
    """Write a perturbed copy of the SQLite database ``src`` to ``dst`` (see the module docstring)."""
    source = sqlite3.connect(f"file:{quote(str(src.resolve()))}?mode=ro", uri=True)
    target = sqlite3.connect(dst, isolation_level=None)
    try:
        schema = source.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
            "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 ELSE 2 END, rowid"
        ).fetchall()
        tables = [n for t, n, sql in schema if t == "table" and not sql.upper().startswith("CREATE VIRTUAL")]
        target.execute("BEGIN")
        for kind, _, sql in schema:  # tables and indexes now (constraints hold while filling), views after
            if kind in ("table", "index") and not sql.upper().startswith("CREATE VIRTUAL"):
                target.execute(sql)
        keys = _key_columns(source, tables)
        for table in tables:
            _copy_table(source, target, table, keys, rng)
        for kind, _, sql in schema:
            if kind == "view":
                target.execute(sql)
        target.execute("COMMIT")
    finally:
        source.close()
        target.close()


def _key_columns(conn: sqlite3.Connection, tables: Sequence[str]) -> set[tuple[str, str]]:
    """(table, column) pairs a neighbour keeps as they are: keys, what keys reference, ``...id`` columns."""
    keys: set[tuple[str, str]] = set()
    for table in tables:
        for _, col, _, _, _, pk in conn.execute(f"PRAGMA table_info({quote_ident(table)})"):
            if pk or col.lower().endswith("id"):
                keys.add((table.lower(), col.lower()))
        for row in conn.execute(f"PRAGMA foreign_key_list({quote_ident(table)})"):
            keys.add((table.lower(), str(row[3]).lower()))
            if row[4] is not None:
                keys.add((str(row[2]).lower(), str(row[4]).lower()))
    return keys


def _copy_table(
    source: sqlite3.Connection, target: sqlite3.Connection, table: str, keys: set[tuple[str, str]], rng: random.Random
) -> None:
    (total,) = source.execute(f"SELECT count(*) FROM {quote_ident(table)}").fetchone()
    keep = (1 - DROP) * min(1.0, MAX_TABLE_ROWS / max(total, 1))
    cur = source.execute(f"SELECT * FROM {quote_ident(table)}")
    names = [d[0] for d in cur.description]
    rows = [list(r) for r in cur if rng.random() < keep]
    for j, name in enumerate(names):
        if (table.lower(), name.lower()) not in keys:
            _perturb_column(rows, j, rng)
    rng.shuffle(rows)
    marks = ", ".join("?" * len(names))
    target.executemany(f"INSERT OR IGNORE INTO {quote_ident(table)} VALUES ({marks})", rows)


def _perturb_column(rows: list[list[Any]], j: int, rng: random.Random) -> None:
    """Permute a random subset of column ``j``'s values, then move some numbers (see the module docstring)."""
    chosen = [i for i in range(len(rows)) if rng.random() < SWAP]
    values = [rows[i][j] for i in chosen]
    rng.shuffle(values)
    for i, v in zip(chosen, values, strict=True):
        rows[i][j] = v
    column = [r[j] for r in rows]
    distinct = len(set(column)) == len(column)
    seen = set(column)
    for r in rows:
        v = r[j]
        if isinstance(v, bool) or not isinstance(v, int | float) or rng.random() >= JITTER:
            continue
        moved = _moved(v, rng)
        if distinct and moved in seen:
            continue
        seen.add(moved)
        r[j] = moved


def _moved(v: int | float, rng: random.Random) -> int | float:
    step = abs(v) * rng.uniform(0.05, 0.2) * rng.choice((-1, 1))
    if isinstance(v, int):
        out: int | float = v + (round(step) or rng.choice((-1, 1)))
    else:
        decimals = len(repr(v).partition(".")[2]) if "e" not in repr(v) else 6
        out = round(v + step, min(decimals, 6)) if step else v + 0.5
    if abs(out) >= 2**63:  # past SQLite's integers
        return v
    return max(out, v * 0) if v >= 0 else out  # v * 0: a zero of v's type
