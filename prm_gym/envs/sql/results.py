"""Query results for the SQL judges: fetched within a bound, cached within a bound, compared like Spider.

* :func:`fetch_rows` reads a result in chunks and stops past :class:`ResultLimits` (rows, and an
  estimate of the bytes held, counted once, a column of a chunk at a time), raising
  :class:`ResultTooLarge`; on SQLite no value may pass :attr:`ResultLimits.value_bytes` while a judge
  reads and a chunk is never larger than the bytes left allow, so a runaway recursive query or a
  result of large blobs never sits whole in memory.
* :class:`Result` holds the rows with their statistics (multiset, set, column contents, the sum
  of its values' hashes), each computed once and only when needed: the gold's are cached with it,
  so a verdict costs a few passes over the submitted rows (none builds a multiset when they come
  in the gold's order; one sum of hashes rules out every column order of other values).
* :class:`ByteLRU` is a least-recently-used cache bounded by the bytes of what it holds.
* :func:`results_match` is Spider's test-suite execution match: the prediction's columns may be
  the gold's in another order, and rows compare as multisets unless the gold orders its output.
* :func:`aligned_columns` lines a prediction's columns up with the gold's for partial credit.
* :func:`repair_spacing` joins the spacing typos Spider's evaluation repairs (``> =``, ``< =``,
  ``! =``) outside string literals.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import itemgetter
from typing import Any, Generic, Literal, TypeVar

from prm_gym.envs.sql.db import Database, SQLiteDatabase

Rows = tuple[tuple[Any, ...], ...]
MatchMode = Literal["multiset", "set"]
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_LITERAL = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")
_SPLIT_OPERATOR = re.compile(r"([<>!])\s+=")
#: Column orders tried before a prediction is declared different (columns with equal contents
#: are interchangeable, so real queries need a handful).
MAX_COLUMN_ORDERS = 10_000
#: The most rows of a prediction :func:`aligned_columns` reads to choose its column order.
ALIGN_SAMPLE = 2000


@dataclass(frozen=True)
class ResultLimits:
    """How much of one query result a judge fetches and compares.

    Attributes:
        rows: the most rows; a longer result is too large.
        bytes: the most bytes held (an estimate: Python objects of the rows); a bigger result is too
            large. On SQLite no value may be longer than :attr:`value_bytes` (``bytes / 512``, at least
            4 KiB: 256 KiB by default) while a judge reads it, so rows are fetched in chunks as large as
            the bytes left allow, and the bound holds whatever the rows hold.
    """

    rows: int = 1_000_000
    bytes: int = 128 << 20

    @property
    def value_bytes(self) -> int:
        return max(4096, self.bytes // 512)


class ResultTooLarge(Exception):
    """The result passed its :class:`ResultLimits`; the message says which bound."""


def repair_spacing(sql: str) -> str:
    """``sql`` with ``> =``, ``< =`` and ``! =`` joined outside string literals."""
    if "=" not in sql:
        return sql
    parts = _LITERAL.split(sql)
    parts[::2] = [_SPLIT_OPERATOR.sub(r"\1=", p) for p in parts[::2]]
    return "".join(parts)


_FETCH_CHUNK = 1024


def row_bytes(row: tuple[Any, ...]) -> int:
    """About how many bytes ``row`` holds as Python objects."""
    size = 56 + 8 * len(row)
    for v in row:
        size += len(v) + 49 if isinstance(v, str | bytes) else 32
    return size


def rows_bytes(rows: Sequence[tuple[Any, ...]]) -> int:
    """About how many bytes ``rows`` hold (:func:`row_bytes` summed, a chunk of columns at a time)."""
    size = 64
    for i in range(0, len(rows), _FETCH_CHUNK):
        size += _chunk_bytes(rows[i : i + _FETCH_CHUNK])
    return size


def _row_cost(width: int, value_bytes: int) -> int:
    """The most bytes one row of ``width`` values of at most ``value_bytes`` each can hold (:func:`row_bytes`)."""
    return 56 + 8 * width + width * (value_bytes + 49)


def _chunk_bytes(chunk: Sequence[tuple[Any, ...]]) -> int:
    """:func:`row_bytes` summed over ``chunk`` (at most, NULLs counted as numbers), a column at a
    time in C loops: a column of strings or blobs sums its lengths, one of numbers only checks that
    they add up (anything else cannot be added), each read in place; a column with NULLs is read
    again without them, and only one that mixes numbers with text or blobs goes value by value."""
    if not chunk:
        return 0
    try:
        return _columns_bytes(chunk, len(chunk[0]))
    except IndexError:  # rows of several widths (never from a database): the columns all rows have
        return _columns_bytes(chunk, min(map(len, chunk)))


def _columns_bytes(chunk: Sequence[tuple[Any, ...]], width: int) -> int:
    size = (56 + 8 * len(chunk[0]) + 49 * width) * len(chunk)
    for i in range(width):
        column = partial(map, itemgetter(i), chunk)
        try:  # the first value's kind is the usual kind of the whole column: try that first
            if isinstance(chunk[0][i], str | bytes):
                size += sum(map(len, column()))
            else:
                sum(column())
            continue
        except TypeError:  # a NULL, or a column of mixed kinds
            pass
        try:
            sum(filter(None, column()))  # numbers and NULLs only
            continue
        except TypeError:
            pass
        try:
            size += sum(map(len, filter(None, column())))  # strings or blobs and NULLs only
        except TypeError:
            size += sum(len(v) if isinstance(v, str | bytes) else 0 for v in column())
    return size


class Result:
    """One query's rows, with the statistics the comparisons need, computed once and kept.

    The gold query's :class:`Result` is cached for the process, so its multiset, set and
    per-column contents are computed once per task, not once per verdict; the submitted query's
    is shared by every judge of one verdict. Computing a statistic twice from two threads gives the
    same value, so no lock is needed.

    Attributes:
        rows: the rows.
        nbytes: about how many bytes they hold (:func:`rows_bytes`).
    """

    __slots__ = ("_columns", "_counter", "_distinct", "_value_hash", "nbytes", "rows")

    def __init__(self, rows: Rows, nbytes: int | None = None) -> None:
        self.rows = rows
        self.nbytes = rows_bytes(rows) if nbytes is None else nbytes
        self._counter: Counter[tuple[Any, ...]] | None = None
        self._distinct: frozenset[tuple[Any, ...]] | None = None
        self._columns: dict[tuple[int, bool], Counter[Any] | frozenset[Any]] = {}
        self._value_hash: int | None = None

    @property
    def width(self) -> int:
        return len(self.rows[0]) if self.rows else 0

    def counter(self) -> Counter[tuple[Any, ...]]:
        """The rows as a multiset."""
        if self._counter is None:
            self._counter = Counter(self.rows)
        return self._counter

    def distinct(self) -> frozenset[tuple[Any, ...]]:
        """The distinct rows."""
        if self._distinct is None:
            self._distinct = frozenset(self.rows)
        return self._distinct

    def column(self, i: int, distinct: bool = False) -> Counter[Any] | frozenset[Any]:
        """Column ``i``'s values, as a multiset (or a set when ``distinct``)."""
        key = (i, distinct)
        hit = self._columns.get(key)
        if hit is None:
            values = map(itemgetter(i), self.rows)
            hit = self._columns[key] = frozenset(values) if distinct else Counter(values)
        return hit

    def value_hash(self) -> int:
        """The sum of the hashes of all the values: equal for two results whose values are equal
        as multisets (Python's equal values hash equal), whatever their columns' order; a cheap test
        that rules out every column order of a different result at once."""
        if self._value_hash is None:
            self._value_hash = sum(map(hash, chain.from_iterable(self.rows)))
        return self._value_hash

    def __len__(self) -> int:
        return len(self.rows)


def as_result(rows: Result | Sequence[tuple[Any, ...]]) -> Result:
    return rows if isinstance(rows, Result) else Result(tuple(rows))


def fetch_rows(db: Database, sql: str, timeout_s: float, limits: ResultLimits) -> Result:
    """The rows of ``sql``, fetched no further than ``limits``, with their size counted once.

    Raises:
        ResultTooLarge: the result passed a bound.
        ToolError: the query is broken, writes or runs too long (the query's fault).
        DatabaseError: the database itself failed.
    """
    if not isinstance(db, SQLiteDatabase):  # fetched in one go by its driver: the row bound caps it
        result = db.query(sql, max_rows=limits.rows, timeout_s=timeout_s)
        if result.truncated:
            raise ResultTooLarge(f"the result has more than {limits.rows} rows")
        size = rows_bytes(result.rows)
        if size > limits.bytes:
            raise ResultTooLarge(f"the result holds more than {limits.bytes} bytes")
        return Result(result.rows, size)
    rows: list[tuple[Any, ...]] = []
    size = 64
    conn = db.conn
    length = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, min(length, limits.value_bytes))
    try:
        with db.cursor(sql, timeout_s) as cur:  # chunk by chunk: never more than the bounds in memory
            widest = _row_cost(len(cur.description or ()), limits.value_bytes)
            while chunk := cur.fetchmany(max(1, min(_FETCH_CHUNK, (limits.bytes - size) // widest))):
                size += _chunk_bytes(chunk)
                rows += chunk
                if len(rows) > limits.rows:
                    raise ResultTooLarge(f"the result has more than {limits.rows} rows")
                if size > limits.bytes:
                    raise ResultTooLarge(f"the result holds more than {limits.bytes} bytes")
    finally:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length)
    return Result(tuple(rows), size)


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

    def discard(self, key: K) -> None:
        """Drop ``key`` if held."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]

    def __len__(self) -> int:
        return len(self._items)


def _column_orders(gold: Result, pred: Result, distinct: bool) -> Iterator[tuple[int, ...]]:
    """Orders of ``pred``'s columns under which each column holds what the gold's column holds."""
    n = gold.width
    options = [[j for j in range(n) if _equal(pred.column(j, distinct), gold.column(i, distinct))] for i in range(n)]
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


def aligned_columns(gold: Result | Rows, pred: Result | Rows) -> Rows:
    """``pred``'s rows with their columns reordered to best line up with the gold's (for partial credit).

    Each gold column, in turn, takes the unused predicted column whose values overlap it most
    (as multisets; a prediction longer than :data:`ALIGN_SAMPLE` rows is judged by its first
    rows); results of different widths, or empty ones, come back unchanged.
    """
    g, p = as_result(gold), as_result(pred)
    if not g.rows or not p.rows or g.width != p.width or p.width < 2:
        return p.rows
    n = g.width
    gold_cols = [g.column(i) for i in range(n)]
    sample = p.rows[:ALIGN_SAMPLE]
    pred_cols = [p.column(j) if len(p) <= ALIGN_SAMPLE else Counter(map(itemgetter(j), sample)) for j in range(n)]
    if all(_common(gold_cols[i], pred_cols[i]) == pred_cols[i].total() for i in range(n)):  # type: ignore[union-attr]
        return p.rows  # each column already overlaps its gold column fully: no other can do better
    order: list[int] = []
    for i in range(n):
        free = [j for j in range(n) if j not in order]
        order.append(max(free, key=lambda j: (_common(gold_cols[i], pred_cols[j]), j == i)))
    if order == list(range(n)):
        return p.rows
    return tuple(tuple(r[j] for j in order) for r in p.rows)


def _common(a: Counter[Any] | frozenset[Any], b: Counter[Any] | frozenset[Any]) -> int:
    """How many values two multisets share, with multiplicity (C loops: key views and ``map``)."""
    assert isinstance(a, Counter) and isinstance(b, Counter)
    if len(a) > len(b):
        a, b = b, a
    shared = [k for k in a if k in b] if len(a) < 64 else a.keys() & b.keys()
    if len(a) == a.total() or len(b) == b.total():  # no repeats on one side: each shared value counts once
        return len(shared)
    return sum(map(min, map(a.__getitem__, shared), map(b.__getitem__, shared)))


def row_f1(gold: Result | Sequence[Hashable], pred: Result | Sequence[Hashable]) -> float:
    """F1 of the rows of two results taken as multisets; 1.0 when both are empty."""
    if isinstance(gold, Result) and isinstance(pred, Result) and gold.rows == pred.rows:
        return 1.0  # the same rows in the same order (or both empty): no multiset needed
    g = gold.counter() if isinstance(gold, Result) else Counter(gold)
    p = pred.counter() if isinstance(pred, Result) else Counter(pred)
    n_gold, n_pred = g.total(), p.total()
    if not n_gold or not n_pred:
        return float(not n_gold and not n_pred)
    same = n_gold if _equal(g, p) else _common(g, p)
    if same == 0:
        return 0.0
    precision, recall = same / n_pred, same / n_gold
    return 2 * precision * recall / (precision + recall)


def results_match(
    gold: Result | Rows, pred: Result | Rows, *, ordered: bool = False, mode: MatchMode = "multiset"
) -> bool:
    """Spider's test-suite execution match (see the module docstring).

    ``"multiset"`` compares rows with their multiplicities (in order when ``ordered``); ``"set"``
    compares distinct rows. Values compare as Python values (``1 == 1.0``). Two empty results match.
    The prediction's columns in the gold's order are tried first (one comparison of whole results,
    the gold's statistics cached); other orders only when that fails.
    """
    g, p = as_result(gold), as_result(pred)
    if not g.rows or not p.rows:
        return not g.rows and not p.rows
    if g.width != p.width or (mode == "multiset" and len(g) != len(p)):
        return False
    distinct = mode == "set"
    if _same(g, p.rows, p, distinct, ordered):
        return True
    if g.width < 2 or (not distinct and g.value_hash() != p.value_hash()):
        return False  # one column, or other values: no column order can match
    for tried, order in enumerate(_column_orders(g, p, distinct)):
        if tried >= MAX_COLUMN_ORDERS:
            return False
        if order == tuple(range(len(order))):
            continue  # tried first, above
        if _same(g, tuple(tuple(r[j] for j in order) for r in p.rows), None, distinct, ordered):
            return True
    return False


def _same(gold: Result, rows: Rows, pred: Result | None, distinct: bool, ordered: bool) -> bool:
    """Whether ``rows`` (``pred``'s rows, or a reordering of them) equal the gold's under the mode."""
    if rows == gold.rows:  # the same rows in the same order are the same multiset and set too
        return True
    if distinct:  # sets: the order never matters
        return (pred.distinct() if pred is not None else frozenset(rows)) == gold.distinct()
    if ordered:
        return False
    return _equal(pred.counter() if pred is not None else Counter(rows), gold.counter())


def _equal(a: Counter[Any] | frozenset[Any], b: Counter[Any] | frozenset[Any]) -> bool:
    """Whether two multisets (or sets) are equal. Counters compare as dicts, in C: the counters here
    hold positive counts only, where that is the same as ``Counter.__eq__`` (a Python loop since 3.10)."""
    if isinstance(a, Counter) and isinstance(b, Counter):
        return dict.__eq__(a, b) is True
    return a == b
