"""The databases an SQL verdict runs on, and each query's results on them, computed once.

A verdict compares the gold and the submitted query on the task's database and on its
neighbours (:mod:`prm_gym.rewards.sql_neighbours`), Spider's test-suite evaluation:

* :meth:`Suite.gold` runs the gold query on each database once per process and keeps the
  results (:class:`~prm_gym.rewards.sql_results.Result`, with their statistics) in a cache bounded
  by bytes. A neighbour on which the gold query fails is left out of that task's comparison; a
  failure on the task's own database is a :class:`~prm_gym.core.errors.JudgeError` (infrastructure).
* :meth:`Suite.predicted` runs the submitted query once per database per verdict, under ONE
  deadline for all of them (the first judge's ``timeout_s``): every SQL judge of the turn reads
  the same :class:`Prediction`, so however many judges and databases, a slow answer costs one
  deadline. Running past it is the agent's (its query is too slow) and scores 0; a failing
  database is infrastructure.

Connections are opened per thread (SQLite connections are not shared between threads) and at
most :data:`MAX_OPEN` per thread are kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prm_gym.core.errors import InfraError, JudgeError, ToolError
from prm_gym.rewards.sql_neighbours import neighbours
from prm_gym.rewards.sql_results import ByteLRU, Result, ResultLimits, ResultTooLarge, fetch_rows, repair_spacing
from prm_gym.rewards.sql_shape import gold_orders
from prm_gym.rewards.types import Turn
from prm_gym.sandbox.sql_db import Database
from prm_gym.sandbox.sql_open import open_database

#: The most connections one thread keeps open.
MAX_OPEN = 32


class GoldTooLarge(JudgeError):
    """The gold query's result is past the judge's bounds: the task cannot be judged as configured."""


@dataclass(frozen=True)
class Gold:
    """The gold query's results: ``results[0]`` on the task's database, then on each neighbour it ran on.

    Attributes:
        keys: the database of each result (a path or a DSN).
        results: the gold query's result on each.
        ordered: the gold's outermost query orders its rows (so order matters).
    """

    keys: tuple[str, ...]
    results: tuple[Result, ...]
    ordered: bool

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self.results)


@dataclass(frozen=True)
class Prediction:
    """The submitted query's results on the gold's databases, in the same order.

    Attributes:
        results: its result on each database, None on the one where it failed and after it.
        why: ``"ok"``, or why it failed (the agent's query: broken, too slow, too large).
        failed_at: the index of the database where it failed (0 is the task's own), or -1.
    """

    results: tuple[Result | None, ...]
    why: str = "ok"
    failed_at: int = -1

    @property
    def main(self) -> Result | None:
        """The result on the task's own database."""
        return self.results[0] if self.results else None

    @property
    def nbytes(self) -> int:
        return 64 + sum(r.nbytes for r in self.results if r is not None)


def db_key(meta: Mapping[str, Any]) -> str:
    return str(meta.get("db_dsn") or meta.get("db_path"))


class Suite:
    """Per-thread open databases, the gold results (they never change) and the recent submitted
    queries' results (the databases are read-only); both caches bounded by bytes held."""

    def __init__(self, gold_bytes: int = 256 << 20, recent_bytes: int = 64 << 20) -> None:
        self._local = threading.local()
        self._gold: ByteLRU[tuple[str, str, ResultLimits, int], Gold] = ByteLRU(gold_bytes)
        self._recent: ByteLRU[tuple[tuple[str, ...], str, ResultLimits], Prediction] = ByteLRU(recent_bytes)

    def get(self, turn: Turn) -> Database:
        """The turn's own database, open in this thread."""
        return self._open(db_key(turn.task.meta), turn.task.meta, turn)

    def _open(self, key: str, meta: Mapping[str, Any], turn: Turn) -> Database:
        cache: dict[str, Database] = self._local.__dict__.setdefault("dbs", {})
        if key not in cache:
            if len(cache) >= MAX_OPEN:
                cache.pop(next(iter(cache))).close()
            try:
                cache[key] = open_database(meta)
            except InfraError as exc:
                raise JudgeError(f"task {turn.task.id}: {exc}") from None
        return cache[key]

    def gold(self, turn: Turn, timeout_s: float, limits: ResultLimits, count: int) -> Gold:
        """The gold query's results on the task's database and up to ``count`` neighbours (cached).

        Raises:
            GoldTooLarge: the gold result on the task's database is past ``limits``.
            JudgeError: the gold query or a database failed.
        """
        gold_sql = str(turn.task.answer)
        key = (db_key(turn.task.meta), gold_sql, limits, count)
        hit = self._gold.get(key)
        if hit is None:
            sql = repair_spacing(gold_sql)
            keys, results = [key[0]], [self._gold_on(turn, self.get(turn), sql, timeout_s, limits)]
            for path in self._neighbour_paths(turn, count):
                try:
                    db = self._open(str(path), {"db_path": str(path)}, turn)
                    results.append(fetch_rows(db, sql, timeout_s, limits))
                    keys.append(str(path))
                except (ToolError, ResultTooLarge):
                    continue  # the gold uses what a neighbour lacks: that neighbour cannot judge this task
                except InfraError as exc:
                    raise JudgeError(f"task {turn.task.id}: a neighbour database failed: {exc}") from None
            hit = Gold(tuple(keys), tuple(results), gold_orders(gold_sql, dialect_of(turn)))
            self._gold.put(key, hit, hit.nbytes)
        return hit

    @staticmethod
    def _gold_on(turn: Turn, db: Database, sql: str, timeout_s: float, limits: ResultLimits) -> Result:
        try:
            return fetch_rows(db, sql, timeout_s, limits)
        except (ToolError, InfraError) as exc:
            raise JudgeError(f"task {turn.task.id}: the gold query failed: {exc}") from None
        except ResultTooLarge as exc:
            raise GoldTooLarge(
                f"task {turn.task.id}: the gold query's result is too large to compare ({exc}); the task is "
                "not judged (reward_status 'infra_error'). Raise the judge's max_rows / max_bytes, e.g. "
                "'rule/execution_match(max_rows=2000000)', or fix the task."
            ) from None

    @staticmethod
    def _neighbour_paths(turn: Turn, count: int) -> list[Any]:
        meta = turn.task.meta
        if count <= 0 or meta.get("db_dsn") or not meta.get("db_path"):
            return []  # neighbours are SQLite files; a server database is judged on itself
        try:
            return list(neighbours(str(meta["db_path"]), count))
        except (OSError, InfraError) as exc:
            raise JudgeError(f"task {turn.task.id}: cannot build neighbour databases: {exc}") from None

    def predicted(self, turn: Turn, gold: Gold, timeout_s: float, limits: ResultLimits) -> Prediction:
        """The submitted query's results on ``gold``'s databases, run once per verdict.

        The judges of one turn share it: the first one runs the query, under one deadline of
        ``timeout_s`` for all the databases; the others read it (the last verdict of each thread
        is always kept, and recent ones while they fit the cache).

        Raises:
            JudgeError: a database itself failed (never cached, so the next turn retries).
        """
        sql = turn.answer or ""
        if not sql.strip():
            return Prediction((None,) * len(gold.keys), "empty query", 0)
        key = (gold.keys, sql, limits)
        last = getattr(self._local, "last", None)
        if last is not None and last[0] == key:
            return last[1]
        hit = self._recent.get(key)
        if hit is None:
            hit = self._run(turn, gold, repair_spacing(sql), timeout_s, limits)
            self._recent.put(key, hit, hit.nbytes + len(sql))
        self._local.last = (key, hit)
        return hit

    def _run(self, turn: Turn, gold: Gold, sql: str, timeout_s: float, limits: ResultLimits) -> Prediction:
        deadline = time.perf_counter() + timeout_s
        results: list[Result | None] = []
        for i, key in enumerate(gold.keys):
            db = self.get(turn) if i == 0 else self._open(key, {"db_path": key}, turn)
            where = "" if i == 0 else f"on neighbour database {i} (same schema, other rows): "
            left = deadline - time.perf_counter()
            try:
                if left <= 0:
                    raise ToolError(f"the query ran past the verdict's time limit of {timeout_s:g} s in all.")
                results.append(fetch_rows(db, sql, left, limits))
            except ToolError as exc:
                return _failed(results, len(gold.keys), where + str(exc)[:200], i)
            except ResultTooLarge as exc:
                return _failed(results, len(gold.keys), f"{where}result too large to compare: {exc}", i)
            except InfraError as exc:
                raise JudgeError(f"task {turn.task.id}: {exc}") from None
        return Prediction(tuple(results))


def _failed(results: list[Result | None], n: int, why: str, at: int) -> Prediction:
    return Prediction(tuple(results) + (None,) * (n - len(results)), why, at)


def dialect_of(turn: Turn) -> str:
    """The SQL dialect of the turn's database: ``meta["db_dialect"]``, else PostgreSQL for a
    ``db_dsn`` and SQLite for a ``db_path``."""
    meta = turn.task.meta
    return str(meta.get("db_dialect") or ("postgres" if meta.get("db_dsn") else "sqlite"))
