"""Query results for the SQL judges: fetched within a bound, cached within a bound, compared like Spider.

* :func:`fetch_rows` streams a result and stops past :class:`ResultLimits` (rows, and an estimate
  of the bytes held), raising :class:`ResultTooLarge`; a SQLite result is read row by row, so a
  runaway recursive query or a result of large blobs never sits whole in memory.
* :class:`ByteLRU` is a least-recently-used cache bounded by the bytes of what it holds.
* :func:`results_match` is Spider's test-suite execution match: the prediction's columns may be
  the gold's in another order, and rows compare as multisets unless the gold orders its output.
* :func:`aligned_columns` lines a prediction's columns up with the gold's for partial credit.
* :func:`repair_spacing` joins the spacing typos Spider's evaluation repairs (``> =``, ``< =``,
  ``! =``) outside string literals.
"""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from prm_gym.sandbox.sql_db import Database, SQLiteDatabase

Rows = tuple[tuple[Any, ...], ...]
MatchMode = Literal["multiset", "set"]
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_LITERAL = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")
_SPLIT_OPERATOR = re.compile(r"([<>!])\s+=")
#: Column orders tried before a prediction is declared different (columns with equal contents
#: are interchangeable, so real queries need a handful).
MAX_COLUMN_ORDERS = 10_000


@dataclass(frozen=True)
class ResultLimits:
    """How much of one query result a judge fetches and compares.

    Attributes:
        rows: the most rows; a longer result is too large.
        bytes: the most bytes held (an estimate: Python objects of the rows); a bigger result is too large.
    """

    rows: int = 100_000
    bytes: int = 32 << 20


class ResultTooLarge(Exception):
    """The result passed its :class:`ResultLimits`; the message says which bound."""


def repair_spacing(sql: str) -> str:
    """``sql`` with ``> =``, ``< =`` and ``! =`` joined outside string literals."""
    if "=" not in sql:
        return sql
    parts = _LITERAL.split(sql)
    parts[::2] = [_SPLIT_OPERATOR.sub(r"\1=", p) for p in parts[::2]]
    return "".join(parts)


def row_bytes(row: tuple[Any, ...]) -> int:
    """About how many bytes ``row`` holds as Python objects."""
    size = 56 + 8 * len(row)
    for v in row:
        size += len(v) + 49 if isinstance(v, str | bytes) else 32
    return size


def rows_bytes(rows: Sequence[tuple[Any, ...]]) -> int:
    return 64 + sum(row_bytes(r) for r in rows)


def fetch_rows(db: Database, sql: str, timeout_s: float, limits: ResultLimits) -> Rows:
    """The rows of ``sql``, fetched no further than ``limits``.

    Raises:
        ResultTooLarge: the result passed a bound.
        ToolError: the query is broken, writes or runs too long (the query's fault).
        DatabaseError: the database itself failed.
    """
    if not isinstance(db, SQLiteDatabase):  # fetched in one go by its driver: the row bound caps it
        result = db.query(sql, max_rows=limits.rows, timeout_s=timeout_s)
        if result.truncated:
            raise ResultTooLarge(f"the result has more than {limits.rows} rows")
        if rows_bytes(result.rows) > limits.bytes:
            raise ResultTooLarge(f"the result holds more than {limits.bytes} bytes")
        return result.rows
    rows: list[tuple[Any, ...]] = []
    size = 64
    with db.cursor(sql, timeout_s) as cur:  # row by row: never more than the bounds in memory
        for row in cur:
            size += row_bytes(row)
            rows.append(row)
            if len(rows) > limits.rows:
                raise ResultTooLarge(f"the result has more than {limits.rows} rows")
            if size > limits.bytes:
                raise ResultTooLarge(f"the result holds more than {limits.bytes} bytes")
    return tuple(rows)


class ByteLRU(Generic[K, V]):
    """A thread-safe least-recently-used cache holding at most ``max_bytes`` (sizes given by the caller)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep ``value`` unless it alone is bigger than the cache; evict the oldest to fit."""
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._items[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, freed) = self._items.popitem(last=False)
                self.bytes -= freed

    def __len__(self) -> int:
        return len(self._items)


def _column_orders(gold: Rows, pred: Rows, distinct: bool) -> Iterator[tuple[int, ...]]:
    """Orders of ``pred``'s columns under which each column holds what the gold's column holds."""
    n = len(gold[0])

    def contents(rows: Rows, i: int) -> Counter[Any] | frozenset[Any]:
        return frozenset(r[i] for r in rows) if distinct else Counter(r[i] for r in rows)

    pred_cols = [contents(pred, j) for j in range(n)]
    options = [[j for j in range(n) if pred_cols[j] == contents(gold, i)] for i in range(n)]
    chosen: list[int] = []

    def extend(i: int) -> Iterator[tuple[int, ...]]:
        if i == n:
            yield tuple(chosen)
            return
        for j in options[i]:
            if j not in chosen:
                chosen.append(j)
                yield from extend(i + 1)
                chosen.pop()

    yield from extend(0)


def aligned_columns(gold: Rows, pred: Rows) -> Rows:
    """``pred`` with its columns reordered to best line up with the gold's (for partial credit).

    Each gold column, in turn, takes the unused predicted column whose values overlap it most
    (as multisets); results of different widths, or empty ones, come back unchanged.
    """
    if not gold or not pred or len(gold[0]) != len(pred[0]) or len(pred[0]) < 2:
        return pred
    n = len(gold[0])
    gold_cols = [Counter(r[i] for r in gold) for i in range(n)]
    pred_cols = [Counter(r[j] for r in pred) for j in range(n)]
    order: list[int] = []
    for i in range(n):
        free = [j for j in range(n) if j not in order]
        order.append(max(free, key=lambda j: (sum((gold_cols[i] & pred_cols[j]).values()), j == i)))
    if order == list(range(n)):
        return pred
    return tuple(tuple(r[j] for j in order) for r in pred)


def results_match(gold: Rows, pred: Rows, *, ordered: bool = False, mode: MatchMode = "multiset") -> bool:
    """Spider's test-suite execution match (see the module docstring).

    ``"multiset"`` compares rows with their multiplicities (in order when ``ordered``); ``"set"``
    compares distinct rows. Values compare as Python values (``1 == 1.0``). Two empty results match.
    """
    if not gold or not pred:
        return not gold and not pred
    if len(gold[0]) != len(pred[0]) or (mode == "multiset" and len(gold) != len(pred)):
        return False
    distinct = mode == "set"
    want: Counter[Any] | frozenset[Any] = frozenset(gold) if distinct else Counter(gold)
    for tried, order in enumerate(_column_orders(gold, pred, distinct)):
        if tried >= MAX_COLUMN_ORDERS:
            return False
        moved = pred if order == tuple(range(len(order))) else tuple(tuple(r[j] for j in order) for r in pred)
        if distinct and frozenset(moved) == want:
            return True
        if not distinct and (list(moved) == list(gold) if ordered else Counter(moved) == want):
            return True
    return False
