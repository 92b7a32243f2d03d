"""SQLite's ``printf`` (and ``format``) without its one loop that no deadline can stop.

SQLite checks a query's progress handler between VM instructions, not inside one function call,
and before 3.42 its ``printf`` wrote a ``%c`` conversion's precision one character at a time,
going on after the length limit was hit: ``printf('%.*c', 2000000000, 'x')`` takes 6-9 s on SQLite
3.40 (Debian 12's, which Python 3.11 there links) whatever the query's deadline or the length
limit, and then returns NULL (the result is over the limit). 3.42.0, 3.43.1, 3.46.0 and 3.51.1
answer it in 0.3-0.5 s (measured through pysqlite3-binary), so :func:`needed` is true before 3.42.

:func:`install` replaces both functions on a connection with one that reads every width and
precision the format asks for, as SQLite reads them (:func:`output_floor`), and answers NULL at
once when together they exceed the connection's length limit, which is what SQLite returns for it
after the loop (below the limit, its loop writes at most the limit's characters). Every other
call is passed, with the same arguments and their storage classes, to the built-in ``printf`` on a
private in-memory connection, so results are SQLite's own. The cost is
a Python call and a statement per call: 100,000 calls took 0.50 s against the built-in's 0.03 s.
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
from typing import Any

# flags, width, precision, length modifiers, the conversion (SQLite's printf.c grammar; ASCII digits only)
_DIRECTIVE = re.compile(r"%[-+ #!0,]*(\*|[0-9]*)(?:\.(\*|[0-9]*))?l{0,2}(.?)", re.S)
_INT_PREFIX = re.compile(r"\s*[-+]?[0-9]+")
#: The conversions SQLite's SQL printf knows; ``%n`` takes no argument there; any other letter ends the format.
_CONVERSIONS = frozenset("dsgzqQwcouxXfeEGinp%r")
_I64 = (-(2**63), 2**63 - 1)


def _int64(value: Any) -> int:
    """``value`` as ``sqlite3_value_int64`` reads it: an integer prefix of text, a real truncated and
    clamped, 0 otherwise."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, str):
        m = _INT_PREFIX.match(value)
        value = int(m.group()) if m else 0
    elif isinstance(value, float):
        value = 0 if math.isnan(value) else _I64[0] if value <= _I64[0] else _I64[1] if value >= _I64[1] else int(value)
    elif not isinstance(value, int):
        return 0
    return min(max(value, _I64[0]), _I64[1])


def _c_int(value: int) -> int:
    """``value``'s low 32 bits as a C ``int`` (SQLite casts a ``*`` argument so)."""
    return (value + 2**31) % 2**32 - 2**31


def output_floor(fmt: Any, args: tuple[Any, ...]) -> int:
    """A lower bound on the length of ``printf(fmt, *args)``: each directive's width, or a ``%c``'s
    repeat count if larger, read as SQLite reads them (``*`` arguments in order and cast to a C int,
    literal digits masked to 31 bits, ``%n`` taking no argument, an unknown conversion ending the
    format). A blob format is read as its bytes."""
    if isinstance(fmt, bytes):
        fmt = fmt.decode("latin-1")
    if not isinstance(fmt, str):
        return 0
    rest, total = iter(args), 0
    for m in _DIRECTIVE.finditer(fmt):
        width_part, precision_part, conversion = m.groups()
        if width_part == "*":
            width = _c_int(_int64(next(rest, 0)))
            width = -width if -(2**31 - 1) <= width < 0 else max(width, 0)
        else:
            width = int(width_part or 0) & 0x7FFFFFFF
        precision = 0
        if precision_part == "*":
            precision = _c_int(_int64(next(rest, 0)))
            precision = -precision if -(2**31 - 1) <= precision < 0 else max(precision, 0)
        elif precision_part:
            precision = int(precision_part) & 0x7FFFFFFF
        if conversion not in _CONVERSIONS:
            break
        if conversion == "n":  # writes nothing and takes no argument in SQL
            continue
        total += max(width, precision if conversion == "c" else 0)
        if conversion != "%":
            next(rest, None)  # the value the conversion formats
    return total


def too_wide(fmt: Any, args: tuple[Any, ...], limit: int) -> bool:
    """True when ``printf(fmt, *args)`` must be longer than ``limit`` (so SQLite's result is NULL)."""
    return output_floor(fmt, args) > limit


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
