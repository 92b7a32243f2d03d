"""SQLite's ``printf`` (and ``format``) without its one loop that no deadline can stop.

SQLite checks a query's progress handler between VM instructions, not inside one function call,
and before 3.42 its ``printf`` wrote a ``%c`` conversion's precision one character at a time,
going on after the length limit was hit: ``printf('%.*c', 2000000000, 'x')`` takes 6-9 s on SQLite
3.40 (Debian 12's, which Python 3.11 there links) whatever the query's deadline or the length
limit, and then returns NULL (the result is over the limit). 3.42.0, 3.43.1, 3.46.0 and 3.51.1
answer it in 0.3-0.5 s (measured through pysqlite3-binary), so :func:`needed` is true before 3.42.

:func:`install` replaces both functions on a connection with one that reads every width and
precision the format asks for (literal digits or ``*`` arguments, converted as SQLite converts
them: an integer prefix of text, a real truncated, the absolute value) and answers NULL at once
when one exceeds the connection's length limit, which is what SQLite returns for it after the
loop. Every other call is passed, with the same arguments and their storage classes, to the
built-in ``printf`` on a private in-memory connection, so results are SQLite's own. The cost is
a Python call and a statement per call: 100,000 calls took 0.50 s against the built-in's 0.03 s.
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
from typing import Any

# flags, width, precision, a length modifier, the conversion (SQLite's printf.c grammar)
_DIRECTIVE = re.compile(r"%[-+ #!0,]*(\*|\d*)(?:\.(\*|\d*))?l{0,2}(.)", re.S)
_INT_PREFIX = re.compile(r"\s*[-+]?\d+")


def _as_int(value: Any) -> int:
    """``value`` as SQLite's ``sqlite3_value_int64`` reads a width or precision argument, made positive."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, str):
        m = _INT_PREFIX.match(value)
        return abs(int(m.group())) if m else 0
    if isinstance(value, float):
        return 0 if math.isnan(value) else (abs(int(value)) if math.isfinite(value) else 2**63)
    return abs(value) if isinstance(value, int) else 0


def too_wide(fmt: Any, args: tuple[Any, ...], limit: int) -> bool:
    """True when a width or precision that ``fmt`` asks for exceeds ``limit`` (so SQLite's
    result is NULL); False for a format that is not text."""
    if not isinstance(fmt, str):
        return False
    rest = iter(args)
    for m in _DIRECTIVE.finditer(fmt):
        width, precision, conversion = m.groups()
        if conversion == "%":
            continue
        for part in (width, precision):
            size = _as_int(next(rest, 0)) if part == "*" else int(part) if part else 0
            if size > limit:
                return True
        next(rest, None)  # the value the conversion formats
    return False


def needed() -> bool:
    """True where the linked SQLite has the slow loop (before 3.42)."""
    return sqlite3.sqlite_version_info < (3, 42, 0)


def install(conn: sqlite3.Connection, limit: int) -> None:
    """Replace ``printf`` and ``format`` on ``conn`` (whose longest string is ``limit`` bytes)."""
    plain = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    plain.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
    lock = threading.Lock()

    def printf(fmt: Any = None, *args: Any) -> Any:
        if too_wide(fmt, args, limit):
            return None
        marks = ", ".join("?" * (len(args) + 1))
        with lock:
            return plain.execute(f"SELECT printf({marks})", (fmt, *args)).fetchone()[0]

    for name in ("printf", "format"):
        conn.create_function(name, -1, printf, deterministic=True)
