"""One sqlglot parse of a SQL query, shared by every judge that reads the query's text.

The SQL judges ask three things of a query's text: does it parse as one read-only query
(``rule/sql_syntax``), which tables and columns does it mention (``rule/sql_schema_link``), and does
its outermost query order its rows (``rule/execution_match``, of the gold query). One parse answers
all three (:class:`SQLShape`); it is the costliest part of a judged SQL turn, so it happens once per
query text, whichever judges, in whatever order, and however many turns a batch holds:

* submitted queries: :data:`SUBMITTED`, an LRU of :data:`SUBMITTED_SIZE` shapes (small frozen
  records), so a whole batch scored judge by judge (TRL's reward functions) parses each query once,
  and a GRPO group's identical submissions once between them;
* gold queries: :data:`GOLD`, never evicted within an epoch's worth of tasks.

Both are keyed by the dialect and the normalised text (:func:`normalise_sql`: Spider's spacing typos repaired, outer
whitespace stripped), which never changes what the parse tells. With sqlglot's compiled build
(``sqlglotc``, in the ``sql`` extra) a parse is about 3x faster than with the pure-Python one; the
results are the same.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from prm_gym.core.extras import missing_extra
from prm_gym.envs.sql.results import repair_spacing

try:
    import sqlglot
    from sqlglot import exp
except ImportError as _exc:
    raise missing_extra(_exc, "sql", "the SQL judges (prm/SQL-v0)") from None

_ORDER_RE = re.compile(r"\border\s+by\b", re.IGNORECASE)
#: The most submitted queries' shapes kept (a shape is a few hundred bytes).
SUBMITTED_SIZE = 4096
#: The most gold queries' shapes kept (one per task).
GOLD_SIZE = 16384


@dataclass(frozen=True)
class SQLShape:
    """What one sqlglot parse of a query tells the judges.

    Attributes:
        read_only: sqlglot parses exactly one SELECT / set-operation statement.
        items: the tables and columns it mentions (``table:<name>``, ``column:<name>``, lower-cased),
            or None when it does not parse.
        orders: the outermost query has an ORDER BY (so row order matters).
    """

    read_only: bool
    items: frozenset[str] | None
    orders: bool


def normalise_sql(sql: str) -> str:
    """The text a query's shape is parsed from and cached under: spacing typos repaired, stripped."""
    return repair_spacing(sql).strip()


def parse_shape(sql: str, dialect: str = "sqlite") -> SQLShape:
    """Parse ``sql`` (already normalised) with sqlglot in ``dialect`` (sqlglot's name) and read
    everything the judges need from the tree."""
    try:
        trees = sqlglot.parse(sql, read=dialect)
    except Exception:
        return SQLShape(False, None, bool(_ORDER_RE.search(sql)))
    if not trees or trees[0] is None:
        return SQLShape(False, None, bool(_ORDER_RE.search(sql)))
    found = [t for t in trees if t is not None]
    read_only = len(found) == 1 and isinstance(found[0], exp.Query)
    tree = exp.Block(expressions=trees) if len(trees) > 1 else trees[0]  # what sqlglot.parse_one returns
    ctes, tables, columns = set(), [], set()
    for node in tree.walk():
        if isinstance(node, exp.CTE):
            ctes.add(node.alias_or_name.lower())
        elif isinstance(node, exp.Table):
            tables.append(node.name.lower())
        elif isinstance(node, exp.Column) and node.name:
            columns.add(f"column:{node.name.lower()}")
    items = frozenset({f"table:{t}" for t in tables if t not in ctes} | columns)
    return SQLShape(read_only, items, tree.args.get("order") is not None)


class ShapeCache:
    """Query shapes by normalised text, least recently used evicted first; safe across threads.

    Attributes:
        parses: how many times this cache has parsed a query (its misses), for tests and benchmarks.
    """

    def __init__(self, size: int):
        self.size = size
        self.parses = 0
        self._shapes: OrderedDict[tuple[str, str], SQLShape] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, sql: str, dialect: str = "sqlite") -> SQLShape:
        key = (normalise_sql(sql), dialect)
        with self._lock:
            shape = self._shapes.get(key)
            if shape is not None:
                self._shapes.move_to_end(key)
                return shape
        shape = parse_shape(*key)  # outside the lock: judges on other threads parse their own queries meanwhile
        with self._lock:
            self.parses += 1
            self._shapes[key] = shape
            while len(self._shapes) > self.size:
                self._shapes.popitem(last=False)
        return shape

    def __len__(self) -> int:
        return len(self._shapes)


#: Submitted queries' shapes (see the module docstring).
SUBMITTED = ShapeCache(SUBMITTED_SIZE)
#: Gold queries' shapes.
GOLD = ShapeCache(GOLD_SIZE)


def sql_shape(sql: str, dialect: str = "sqlite") -> SQLShape:
    """The shape of a submitted query, parsed at most once per normalised text and dialect while it is cached."""
    return SUBMITTED(sql, dialect)


def gold_shape(sql: str, dialect: str = "sqlite") -> SQLShape:
    """The shape of a gold query, parsed once per task."""
    return GOLD(sql, dialect)


def gold_orders(sql: str, dialect: str = "sqlite") -> bool:
    """True when the outermost query of ``sql`` has an ORDER BY (so row order matters)."""
    return GOLD(sql, dialect).orders


def is_read_only_query(sql: str, dialect: str = "sqlite") -> bool:
    """True when sqlglot parses ``sql`` (in ``dialect``) as exactly one SELECT / set operation query."""
    return SUBMITTED(sql, dialect).read_only
