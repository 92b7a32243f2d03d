"""Text-to-SQL judges: execution match and partial credit in the spirit of Reasoning-SQL.

==========================  ========  ======  ==============================================
id                          term      scope   score
==========================  ========  ======  ==============================================
``rule/execution_match``    outcome   final   1.0 when the submitted query's result equals the
                                              gold query's (Spider's test-suite semantics:
                                              columns in any order, rows a multiset, ordered
                                              when the gold's outermost query orders), else 0.0
``rule/sql_syntax``         syntax    final   0.5 if sqlglot parses one read-only query, plus
                                              0.5 if it executes without error, in [0, 1]
``rule/sql_schema_link``    schema    final   Jaccard overlap of the tables and columns used
                                              by the submitted and the gold query, in [0, 1]
``rule/sql_result_overlap`` overlap   final   F1 of the result rows (as multisets, columns
                                              lined up with the gold's), in [0, 1]
``rule/sql_explore``        explore   turn    fraction of this turn's tool calls that
                                              succeeded and repeat no earlier call, in [0, 1]
==========================  ========  ======  ==============================================

The task names its database in ``meta`` (``db_path`` or ``db_dsn``, see :mod:`prm_gym.sandbox.sql_db`),
and the judges parse both queries in its dialect (``meta["db_dialect"]``; default PostgreSQL for
a ``db_dsn``, SQLite for a ``db_path``).
A failure of the gold query or of the database raises :class:`prm_gym.core.errors.JudgeError` (an
infrastructure failure); a submitted query that is broken, writes or times out scores 0. Both
queries have Spider's spacing typos repaired first (``> =`` runs as ``>=``). Results are fetched
and cached within bounds (:mod:`prm_gym.rewards.sql_results`): a submitted result past
``max_rows`` rows or ``max_bytes`` bytes scores 0 with the reason, a gold result past them is a
``JudgeError`` that names the knobs.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

from prm_gym.core.errors import ConfigError, InfraError, JudgeError, ToolError
from prm_gym.core.parsing import parse_action
from prm_gym.rewards.protocol import TurnJudge
from prm_gym.rewards.sql_results import (
    ByteLRU,
    MatchMode,
    ResultLimits,
    ResultTooLarge,
    Rows,
    aligned_columns,
    fetch_rows,
    repair_spacing,
    results_match,
    rows_bytes,
)
from prm_gym.rewards.sql_shape import SQLShape, gold_orders, gold_shape, is_read_only_query, sql_shape
from prm_gym.rewards.types import Turn, Verdict
from prm_gym.sandbox.sql_db import Database
from prm_gym.sandbox.sql_open import open_database

_MAX_OPEN = 32
__all__ = [  # the query-shape helpers live in prm_gym.rewards.sql_shape and are re-exported here
    "DATABASES",
    "ExecutionMatchJudge",
    "ExploreJudge",
    "ResultOverlapJudge",
    "SQLShape",
    "SchemaLinkJudge",
    "SyntaxJudge",
    "dialect_of",
    "gold_orders",
    "gold_shape",
    "is_read_only_query",
    "row_f1",
    "rows_match",
    "sql_shape",
]


def rows_match(
    gold: Sequence[tuple[Any, ...]],
    pred: Sequence[tuple[Any, ...]],
    *,
    ordered: bool = False,
    mode: MatchMode = "multiset",
) -> bool:
    """Whether two results are equal (:func:`prm_gym.rewards.sql_results.results_match`).

    ``"multiset"`` compares rows with their multiplicities, in order when ``ordered``;
    ``"set"`` compares the sets of distinct rows (the semantics of skyrl-gym's SQL reward).
    Values compare as Python values (``1 == 1.0``); the columns may come in another order.
    """
    return results_match(tuple(gold), tuple(pred), ordered=ordered, mode=mode)


def row_f1(gold: Sequence[Hashable], pred: Sequence[Hashable]) -> float:
    """F1 of the rows of two results taken as multisets; 1.0 when both are empty."""
    if not gold or not pred:
        return float(not gold and not pred)
    same = sum((Counter(gold) & Counter(pred)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


def dialect_of(turn: Turn) -> str:
    """The SQL dialect of the turn's database: ``meta["db_dialect"]``, else PostgreSQL for a
    ``db_dsn`` and SQLite for a ``db_path``."""
    meta = turn.task.meta
    return str(meta.get("db_dialect") or ("postgres" if meta.get("db_dsn") else "sqlite"))


def _db_key(turn: Turn) -> str:
    return str(turn.task.meta.get("db_dsn") or turn.task.meta.get("db_path"))


class _Databases:
    """Per-thread open databases, a cache of gold results (they never change) and a small cache
    of submitted queries' results (the databases are read-only), so the judges of one turn run
    the submitted query once between them. Both caches are bounded by bytes held."""

    def __init__(self, gold_bytes: int = 256 << 20, recent_bytes: int = 64 << 20) -> None:
        self._local = threading.local()
        self._gold: ByteLRU[tuple[str, str, ResultLimits], tuple[Rows, bool]] = ByteLRU(gold_bytes)
        self._recent: ByteLRU[tuple[str, str, float, ResultLimits], tuple[Rows | None, str]] = ByteLRU(recent_bytes)

    def get(self, turn: Turn) -> Database:
        cache: dict[str, Database] = self._local.__dict__.setdefault("dbs", {})
        key = _db_key(turn)
        if key not in cache:
            if len(cache) >= _MAX_OPEN:
                cache.pop(next(iter(cache))).close()
            try:
                cache[key] = open_database(turn.task.meta)
            except InfraError as exc:
                raise JudgeError(f"task {turn.task.id}: {exc}") from None
        return cache[key]

    def gold(self, turn: Turn, timeout_s: float, limits: ResultLimits) -> tuple[Rows, bool]:
        db, gold_sql = self.get(turn), str(turn.task.answer)
        key = (_db_key(turn), gold_sql, limits)
        hit = self._gold.get(key)
        if hit is None:
            try:
                rows = fetch_rows(db, repair_spacing(gold_sql), timeout_s, limits)
            except (ToolError, InfraError) as exc:
                raise JudgeError(f"task {turn.task.id}: the gold query failed: {exc}") from None
            except ResultTooLarge as exc:
                raise JudgeError(
                    f"task {turn.task.id}: the gold query's result is too large to compare ({exc}); "
                    "raise the judge's max_rows / max_bytes or fix the task."
                ) from None
            hit = (rows, gold_orders(gold_sql, dialect_of(turn)))
            self._gold.put(key, hit, rows_bytes(rows))
        return hit

    def predicted(self, turn: Turn, timeout_s: float, limits: ResultLimits) -> tuple[Rows | None, str]:
        """The submitted query's rows, or None and why it failed (the agent's fault).

        Raises:
            JudgeError: the database itself failed (never cached, so the next turn retries).
        """
        sql = turn.answer or ""
        if not sql.strip():
            return None, "empty query"
        key = (_db_key(turn), sql, timeout_s, limits)
        hit = self._recent.get(key)
        if hit is not None:
            return hit
        try:
            result: tuple[Rows | None, str] = (fetch_rows(self.get(turn), repair_spacing(sql), timeout_s, limits), "ok")
        except ToolError as exc:
            result = (None, str(exc)[:200])
        except ResultTooLarge as exc:
            result = (None, f"result too large to compare: {exc}")
        except InfraError as exc:
            raise JudgeError(f"task {turn.task.id}: {exc}") from None
        self._recent.put(key, result, rows_bytes(result[0] or ()) + len(sql))
        return result


DATABASES = _Databases()


class _SQLJudge(TurnJudge):
    """Args: ``timeout_s`` per query; ``max_rows`` and ``max_bytes`` bound each result compared."""

    name = "rule/sql"
    #: Deterministic on read-only databases, and the query's rows and parse are cached here already:
    #: recomputing on a fork's replay beats hashing every turn (its prompt holds the schema) to memoise.
    memoize = False

    def __init__(self, timeout_s: float = 5.0, max_rows: int = 100_000, max_bytes: int = 32 << 20):
        if max_rows < 1 or max_bytes < 1:
            raise ConfigError(f"{self.name}: max_rows and max_bytes must be >= 1, got {max_rows}, {max_bytes}.")
        self.timeout_s = timeout_s
        self.limits = ResultLimits(max_rows, max_bytes)


class ExecutionMatchJudge(_SQLJudge):
    """1.0 when the submitted SQL returns the gold result, else 0.0.

    Args:
        mode: ``"multiset"`` (default) or ``"set"`` (skyrl-gym / distinct-row semantics).
        timeout_s: time limit of each query.
        max_rows, max_bytes: the most rows and bytes of one result compared; a submitted result
            past either scores 0.0 with the reason.
    """

    name = "rule/execution_match"

    def __init__(
        self, mode: MatchMode = "multiset", timeout_s: float = 5.0, max_rows: int = 100_000, max_bytes: int = 32 << 20
    ):
        if mode not in ("multiset", "set"):
            raise ConfigError(f"rule/execution_match: mode must be 'multiset' or 'set', got {mode!r}.")
        super().__init__(timeout_s, max_rows, max_bytes)
        self.mode: MatchMode = mode

    def score_one(self, turn: Turn) -> Verdict:
        gold, ordered = DATABASES.gold(turn, self.timeout_s, self.limits)
        pred, why = DATABASES.predicted(turn, self.timeout_s, self.limits)
        if pred is None:
            return Verdict(0.0, detail=why)
        ok = rows_match(gold, pred, ordered=ordered, mode=self.mode)
        return Verdict(float(ok), detail="match" if ok else "different result")


class SyntaxJudge(_SQLJudge):
    """0.5 when sqlglot parses one read-only query, plus 0.5 when it executes."""

    name = "rule/sql_syntax"
    term = "syntax"

    def score_one(self, turn: Turn) -> Verdict:
        sql = turn.answer or ""
        parses = is_read_only_query(sql, dialect_of(turn))
        runs = parses and DATABASES.predicted(turn, self.timeout_s, self.limits)[0] is not None
        return Verdict(0.5 * parses + 0.5 * runs)


class SchemaLinkJudge(_SQLJudge):
    """Jaccard overlap of the tables and columns of the submitted and the gold query."""

    name = "rule/sql_schema_link"
    term = "schema"

    def score_one(self, turn: Turn) -> Verdict:
        dialect = dialect_of(turn)
        pred, gold = sql_shape(turn.answer or "", dialect).items, gold_shape(str(turn.task.answer), dialect).items
        if pred is None or gold is None:
            return Verdict(0.0, detail="unparseable")
        union = pred | gold
        return Verdict(len(pred & gold) / len(union) if union else 1.0)


class ResultOverlapJudge(_SQLJudge):
    """F1 of the submitted query's result rows against the gold rows, as multisets, with the
    submitted columns lined up with the gold's first (:func:`~prm_gym.rewards.sql_results.aligned_columns`)."""

    name = "rule/sql_result_overlap"
    term = "overlap"

    def score_one(self, turn: Turn) -> Verdict:
        gold, _ = DATABASES.gold(turn, self.timeout_s, self.limits)
        pred, why = DATABASES.predicted(turn, self.timeout_s, self.limits)
        if pred is None:
            return Verdict(0.0, detail=why)
        f1 = row_f1(gold, pred)
        return Verdict(f1 if f1 == 1.0 else max(f1, row_f1(gold, aligned_columns(gold, pred))))


class ExploreJudge(_SQLJudge):
    """The fraction of this turn's tool calls that succeeded and repeat no earlier call."""

    name = "rule/sql_explore"
    term = "explore"
    scope = "turn"

    def score_one(self, turn: Turn) -> Verdict:
        calls = turn.parsed.tool_calls
        if not calls or not turn.tool_results:
            return Verdict(0.0)
        fmt = turn.parsed.tool_format
        seen = {c.to_json() for action, _ in turn.history for c in parse_action(action, tool_format=fmt).tool_calls}
        fresh = 0
        for call, result in zip(calls, turn.tool_results, strict=False):
            key = call.to_json()
            fresh += int(result.ok and key not in seen)
            seen.add(key)
        return Verdict(fresh / len(calls))
