"""Read-only SQLite databases for the SQL env and its judges.

:class:`SQLiteDatabase` opens one database so that nothing the agent sends can change it or
anything else on disk:

* the file is opened through a ``mode=ro`` URI (or copied into memory first, ``copy=True``);
* ``PRAGMA query_only`` is set and an authorizer allows only reads (``SELECT``, ``WITH``,
  ``UNION``, functions and a list of read-only pragmas); ``ATTACH`` is limited to 0 databases,
  so no statement can create, write or attach files;
* every query has a wall-clock limit enforced by a progress handler (runaway recursive CTEs,
  cartesian joins), a cap on the length of any string or blob it builds, and a cap on the rows
  fetched; result columns and LIKE patterns are capped, and a tool query's values and rows too
  (:data:`MAX_COLUMNS`, :data:`MAX_LIKE_PATTERN`, :data:`TOOL_VALUE_BYTES`, :data:`TOOL_RESULT_BYTES`:
  one function call or one row is built whole between two checks of the clock); ``printf`` and
  ``format`` answer a width or precision over the length cap at once (:mod:`prm_gym.envs.sql.printf`:
  before SQLite 3.42 its own loop for it ran seconds past any deadline).

Failures are typed by what failed, never by the error's text (which quotes the agent's SQL):
the agent's own mistakes (broken SQL, a write, a timeout) raise
:class:`prm_gym.core.errors.ToolError`; a missing or non-SQLite database, a closed connection,
or an error whose SQLite code can mean a broken database when a probe of the database
(``PRAGMA quick_check``) then fails too, raise :class:`DatabaseError`, an
:class:`prm_gym.core.errors.InfraError`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from prm_gym.core.errors import InfraError, ToolError
from prm_gym.envs.sql import printf

SQLITE_MAGIC = b"SQLite format 3\x00"
#: Pragmas a query may use: each only reads (its argument names a table or an index).
READ_PRAGMAS = frozenset({"table_info", "table_xinfo", "index_list", "index_info", "foreign_key_list", "table_list"})
_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_PROGRESS_OPS = 2000  # VM instructions between two clock checks
#: The most columns a table, index or result may have (SQLite's default is 2,000): with the value cap, it
#: bounds one row, which SQLite builds whole before the progress handler runs again.
MAX_COLUMNS = 500
#: The longest LIKE or GLOB pattern in bytes (SQLite's default is 50,000): one match costs up to the
#: text's length times the pattern's, inside one function call the deadline cannot stop.
MAX_LIKE_PATTERN = 1000
#: A tool query's longest string or blob, as a judge's (its output is cut to a few dozen characters a
#: cell anyway): with :data:`MAX_COLUMNS`, one row holds at most 128 MiB, and one ``instr`` or
#: ``LIKE`` call costs at most about half a second.
TOOL_VALUE_BYTES = 256 << 10
#: The bytes of rows a tool query holds at most: its rows are read one at a time and it stops past this.
TOOL_RESULT_BYTES = 64 << 20
#: Primary SQLite result codes that can mean the database (not the query) failed: for these
#: the database is probed before blaming it (an agent's query can raise some of them too).
_SUSPECT_CODES = frozenset(
    getattr(sqlite3, name)
    for name in (
        "SQLITE_PERM",
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
        "SQLITE_IOERR",
        "SQLITE_CORRUPT",
        "SQLITE_FULL",
        "SQLITE_CANTOPEN",
        "SQLITE_PROTOCOL",
        "SQLITE_SCHEMA",
        "SQLITE_NOTADB",
    )
)
#: Seconds the soundness probe of a suspect database may take.
PROBE_TIMEOUT_S = 10.0


class DatabaseError(InfraError):
    """The database is missing, unreadable or not a database of the expected kind."""


@dataclass(frozen=True)
class QueryResult:
    """Rows of one read-only query.

    Attributes:
        columns: the column names.
        rows: at most ``max_rows`` rows (all of them when ``max_rows`` is None).
        truncated: True when the query had more rows than were fetched.
        latency_s: wall-clock seconds the query took.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool = False
    latency_s: float = 0.0


class Database(Protocol):
    """What the SQL env and judges need from a backend (SQLite, PostgreSQL)."""

    name: str

    def query(self, sql: str, *, max_rows: int | None = None, timeout_s: float = 5.0) -> QueryResult: ...

    def tables(self) -> list[str]: ...

    def describe(self, table: str) -> str: ...

    def close(self) -> None: ...


def check_sqlite_file(path: str | Path) -> Path:
    """``path`` as a Path after checking it exists and starts with the SQLite header.

    Raises:
        DatabaseError: the file is missing, unreadable or not an SQLite 3 database.
    """
    p = Path(path)
    if not p.is_file():
        raise DatabaseError(f"SQLite database {str(p)!r} does not exist (or is not a file).")
    try:
        with p.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise DatabaseError(f"SQLite database {str(p)!r} cannot be read: {exc}.") from None
    if head != SQLITE_MAGIC:
        raise DatabaseError(f"{str(p)!r} is not an SQLite 3 database (wrong file header).")
    return p


def quote_ident(name: str) -> str:
    """``name`` as a double-quoted SQL identifier (any unicode, quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


#: Functions no query may call, whatever the build of SQLite allows: ``fts3_tokenizer`` with two arguments
#: registers a tokenizer at a pointer the caller gives (where SQLite is built with ENABLE_FTS3_TOKENIZER, as
#: Debian's is), a known way to make the process jump to an address of the query's choosing.
DENIED_FUNCTIONS = frozenset({"fts3_tokenizer", "load_extension"})


def _authorizer(action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None) -> int:
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def connect_readonly(path: str | Path, *, copy: bool = False, max_length: int = 10_000_000) -> sqlite3.Connection:
    """A guarded read-only connection to the SQLite file at ``path`` (see the module doc).

    Args:
        path: the database file.
        copy: copy the database into memory first, so the episode has its own copy.
        max_length: the longest string or blob a query may build, in bytes.

    Raises:
        DatabaseError: the file is missing or not an SQLite database.
    """
    p = check_sqlite_file(path)
    uri = f"file:{quote(str(p.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        if copy:
            mem = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            conn.backup(mem)
            conn.close()
            conn = mem
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"cannot open SQLite database {str(p)!r}: {exc}.") from None
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_length)
    conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_LIKE_PATTERN)
    if printf.needed():  # before SQLite 3.42 printf has a loop no deadline stops: printf.py
        printf.install(conn, max_length)
    conn.set_authorizer(_authorizer)
    return conn


def error_code(exc: BaseException) -> int | None:
    """SQLite's primary result code of ``exc`` (None for errors raised by the sqlite3 module itself)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def agent_message(exc: Exception) -> str:
    """A short explanation of a failed query, written for the agent (chosen by error type and code)."""
    code = error_code(exc)
    if code in (sqlite3.SQLITE_AUTH, sqlite3.SQLITE_READONLY):
        return "only read-only queries (SELECT / WITH) are allowed; the statement was refused."
    if code == sqlite3.SQLITE_INTERRUPT:
        return "the query ran past its time limit and was stopped; avoid unbounded joins or recursion."
    if isinstance(exc, sqlite3.ProgrammingError | sqlite3.Warning) and code is None:
        return f"send exactly one SQL statement per query, with no ? parameters ({exc})."
    return f"{type(exc).__name__}: {exc}"


def database_sound(path: Path | None, conn: sqlite3.Connection) -> bool:
    """True when the database still opens and passes ``PRAGMA quick_check``.

    ``path`` is the file (probed through a fresh connection); None probes ``conn`` itself
    (an in-memory copy). Used only after an error whose code could mean a broken database.
    """
    try:
        if path is not None:
            check_sqlite_file(path)
            probe = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, check_same_thread=False)
        else:
            probe = conn
            conn.set_authorizer(None)
        deadline = time.perf_counter() + PROBE_TIMEOUT_S
        probe.set_progress_handler(lambda: int(time.perf_counter() > deadline), _PROGRESS_OPS)
        try:
            rows = probe.execute("PRAGMA quick_check(1)").fetchall()
        finally:
            probe.set_progress_handler(None, 0)
            if probe is conn:
                conn.set_authorizer(_authorizer)
            else:
                probe.close()
    except (sqlite3.Error, DatabaseError, OSError):
        return False
    return rows == [("ok",)]


class SQLiteDatabase:
    """One guarded, read-only SQLite database.

    Args:
        path: the ``.sqlite`` file.
        copy: run on a private in-memory copy instead of a read-only view of the file.
    """

    def __init__(self, path: str | Path, *, copy: bool = False):
        self.path = Path(path)
        self.name = self.path.stem
        self.copy = copy
        self._conn: sqlite3.Connection | None = connect_readonly(path, copy=copy)
        # one statement at a time: its progress handler (the deadline) and length cap are the
        # connection's, so a tool call abandoned past its deadline must not share them with the next
        self._lock = threading.RLock()

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise DatabaseError(f"database {self.name!r} is closed.")
        return self._conn

    def query(self, sql: str, *, max_rows: int | None = None, timeout_s: float = 5.0) -> QueryResult:
        """Run one read-only statement and fetch up to ``max_rows`` rows, one at a time, stopping
        (``truncated``) once they hold :data:`TOOL_RESULT_BYTES`; no value may be longer than
        :data:`TOOL_VALUE_BYTES` meanwhile.

        Raises:
            ToolError: the SQL is broken, writes, holds several statements or runs too long.
            DatabaseError: the database itself failed (corrupt, vanished).
        """
        with self._lock:
            return self._query(sql, max_rows, timeout_s)

    def _query(self, sql: str, max_rows: int | None, timeout_s: float) -> QueryResult:
        start = time.perf_counter()
        conn = self.conn
        length = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, min(length, TOOL_VALUE_BYTES))
        rows: list[tuple[Any, ...]] = []
        truncated, held = False, 0
        try:
            with self.cursor(sql, timeout_s) as cur:
                while (row := cur.fetchone()) is not None:
                    if max_rows is not None and len(rows) == max_rows:
                        truncated = True
                        break
                    rows.append(row)
                    held += sum(len(v) if isinstance(v, str | bytes) else 8 for v in row)
                    if held > TOOL_RESULT_BYTES:  # checked before the next row is built
                        truncated = True
                        break
                columns = tuple(d[0] for d in cur.description or ())
        finally:
            if self._conn is not None:
                conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length)
        return QueryResult(columns, tuple(rows), truncated, time.perf_counter() - start)

    @contextmanager
    def cursor(self, sql: str, timeout_s: float = 5.0) -> Iterator[sqlite3.Cursor]:
        """A cursor over one read-only statement's rows, under the wall-clock stop; the rows may be
        read one by one (a caller that bounds what it holds). Errors while executing or reading are
        classified as in :meth:`query`; leaving the block ends the statement and its transaction.

        Raises:
            ToolError: the SQL is broken, writes, holds several statements or runs too long.
            DatabaseError: the database itself failed (corrupt, vanished).
        """
        with self._lock:
            yield from self._cursor(sql, timeout_s)

    def _cursor(self, sql: str, timeout_s: float) -> Iterator[sqlite3.Cursor]:
        conn = self.conn
        deadline = time.perf_counter() + timeout_s
        conn.set_progress_handler(lambda: int(time.perf_counter() > deadline), _PROGRESS_OPS)
        cur = conn.cursor()
        try:
            cur.execute(sql)
            if cur.description is None:
                raise ToolError("only read-only queries (SELECT / WITH) are allowed; this statement returns no rows.")
            yield cur
        except sqlite3.Error as exc:
            self._classify(exc)
            raise ToolError(agent_message(exc)) from None
        except (ValueError, OverflowError, MemoryError) as exc:
            raise ToolError(agent_message(exc)) from None
        finally:
            cur.close()
            conn.set_progress_handler(None, 0)
            if conn.in_transaction:
                conn.rollback()

    def _classify(self, exc: sqlite3.Error) -> None:
        """Raise DatabaseError when ``exc`` came from the database, not from the query.

        Decided by what failed, never by the message (which quotes the agent's SQL): an error
        raised on a closed connection, or one whose SQLite code can mean a broken database
        (corrupt, unreadable, locked, gone) when a probe of the database then fails too.
        """
        if self._conn is None or (error_code(exc) is None and not _open(self._conn)):
            raise DatabaseError(f"database {self.name!r} failed: the connection is closed.") from None
        if error_code(exc) in _SUSPECT_CODES and not database_sound(None if self.copy else self.path, self._conn):
            name = getattr(exc, "sqlite_errorname", type(exc).__name__)
            raise DatabaseError(f"database {self.name!r} failed ({name}) and no longer passes a check: {exc}.")

    def tables(self) -> list[str]:
        rows = self.query(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).rows
        return [str(r[0]) for r in rows]

    def describe(self, table: str) -> str:
        """Columns (type, key), foreign keys and three sample rows of ``table``.

        Raises:
            ToolError: no such table.
        """
        if table not in self.tables():
            raise ToolError(f"no table named {table!r}; tables: {self.tables()}.")
        cols = [(r[1], r[2], r[5]) for r in self.query(f"PRAGMA table_info({_lit(table)})").rows]
        fks = [(r[3], r[2], r[4]) for r in self.query(f"PRAGMA foreign_key_list({_lit(table)})").rows]
        lines = [f"TABLE {quote_ident(table)}"]
        lines += [f"  {quote_ident(c)} {t or 'ANY'}{' PRIMARY KEY' if pk else ''}" for c, t, pk in cols]
        lines += [
            f"  FOREIGN KEY ({quote_ident(a)}) REFERENCES {quote_ident(b)}({quote_ident(str(c))})" for a, b, c in fks
        ]
        shown = ", ".join(quote_ident(c) for c, _, _ in cols[:MAX_COLUMNS]) or "*"  # a wider table: its first ones
        try:
            sample = format_result(self.query(f"SELECT {shown} FROM {quote_ident(table)} LIMIT 3"), max_chars=2000)
        except ToolError as exc:  # a value past the tool's cap: the columns are still worth having
            sample = f"(unavailable: {exc})"
        lines.append("Sample rows:")
        lines.append(sample)
        return "\n".join(lines)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _open(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018 (raises on a closed connection)
    except sqlite3.ProgrammingError:
        return False
    return True


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def format_result(result: QueryResult, *, max_chars: int = 4000, max_cell: int = 80) -> str:
    """``result`` as a pipe-separated text table, cut to ``max_chars`` characters."""

    def cell(v: Any) -> str:
        s = "NULL" if v is None else (f"<blob {len(v)} bytes>" if isinstance(v, bytes) else str(v))
        s = s.replace("\n", " ").replace("|", "/")
        return s if len(s) <= max_cell else s[: max_cell - 3] + "..."

    lines = [" | ".join(result.columns)]
    lines += [" | ".join(cell(v) for v in row) for row in result.rows]
    text = "\n".join(lines)
    if len(text) > max_chars:
        text = text[:max_chars] + "\n[... output cut]"
    n = len(result.rows)
    more = f"showing the first {n} rows; the query returned more" if result.truncated else f"{n} rows"
    return f"{text}\n({more})"
