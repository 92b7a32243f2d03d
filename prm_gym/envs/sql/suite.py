"""The databases an SQL verdict runs on, and each query's results on them, computed once.

A verdict compares the gold and the submitted query on the task's database and on its
neighbours (:mod:`prm_gym.envs.sql.neighbours`), Spider's test-suite evaluation:

* :meth:`Suite.gold` runs the gold query on each database once per process and keeps the
  results (:class:`~prm_gym.envs.sql.results.Result`, with their statistics) in a cache bounded
  by bytes. A neighbour on which the gold query fails is left out of that task's comparison; a
  failure on the task's own database is a :class:`~prm_gym.core.errors.JudgeError` (infrastructure).
* :meth:`Suite.predicted` gives the submitted query's :class:`Prediction`, shared by every SQL
  judge of the turn: the query runs at most once per database per verdict, on a database only
  when a judge needs it (a wrong answer usually stops at the task's own), and all its runs share
  ONE budget (the first judge's ``timeout_s``), so however many judges and databases, a slow
  answer costs one deadline. Running past it is the agent's (its query is too slow) and scores
  0; a failing database is infrastructure.

Connections are opened per thread (SQLite connections are not shared between threads) and at
most :data:`MAX_OPEN` per thread are kept. They are process-wide (:data:`prm_gym.envs.sql.judges.DATABASES`
serves every SQL judge), and closed with the last user: each SQL env holds the suite from
``__init__`` to ``close()`` (:meth:`Suite.acquire` / :meth:`Suite.release`), and when the last one
closes every thread's connections are closed (a thread that uses the suite later opens new ones);
a throwaway PostgreSQL server's connections are closed when it stops. Judges used with no env
keep theirs until their thread ends. The result caches hold rows, not connections, and stay.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prm_gym.core.errors import InfraError, JudgeError, ToolError
from prm_gym.envs.sql.db import Database
from prm_gym.envs.sql.neighbours import neighbours
from prm_gym.envs.sql.open import open_database
from prm_gym.envs.sql.results import (
    ByteLRU,
    Result,
    ResultLimits,
    ResultTooLarge,
    fetch_rows,
    repair_spacing,
    results_match,
)
from prm_gym.envs.sql.shape import gold_orders
from prm_gym.rewards.types import Turn

#: The most connections one thread keeps open.
MAX_OPEN = 32
#: Neighbours tried beyond ``count`` when the gold's rows are the same on all of the first ``count``.
EXTRA_NEIGHBOURS = 5


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


class Prediction:
    """The submitted query's results on the gold's databases, in the same order, each run the first
    time a judge asks for it (:meth:`on`), all under one time budget.

    A judge reads only what its verdict needs: execution match stops at the first database where
    the results differ, result overlap at a first F1 of 0, so a wrong answer usually costs one run.
    The runs of all the judges of a verdict share ``timeout_s``: the query's time on every database
    counts against it, and once it is spent the query has failed (the agent's: too slow).

    Attributes:
        why: ``"ok"``, or why the query failed (broken, too slow, too large: the agent's).
        failed_at: the index of the database where it failed (0 is the task's own), or -1.
        spent_s: seconds the query has run so far, over all databases.
    """

    def __init__(self, suite: Suite, key: PredictionKey, turn: Turn, sql: str, timeout_s: float) -> None:
        self._suite, self.key, self._turn = suite, key, turn
        self.keys, self._limits = key[0], key[2]
        self._sql, self.timeout_s = sql, timeout_s
        self._results: list[Result] = []
        self.why, self.failed_at, self.spent_s = "ok", -1, 0.0
        self._lock = threading.Lock()
        if not sql.strip():
            self.why, self.failed_at = "empty query", 0

    @property
    def main(self) -> Result | None:
        """The result on the task's own database (None when the query failed there)."""
        return self.on(0)

    def on(self, i: int) -> Result | None:
        """The result on database ``i`` (0 is the task's), running the query on it and on those
        before it if not done yet; None when the query failed there or before.

        Raises:
            JudgeError: a database itself failed.
        """
        with self._lock:
            if len(self._results) <= i and self.failed_at < 0:
                while len(self._results) <= i and self.failed_at < 0:
                    self._run_next()
                self._suite._resize(self)
            return self._results[i] if i < len(self._results) else None

    @property
    def nbytes(self) -> int:
        return 64 + len(self._sql) + sum(r.nbytes for r in self._results)

    def _run_next(self) -> None:
        i = len(self._results)
        turn, key = self._turn, self.keys[i]
        db = self._suite.get(turn) if i == 0 else self._suite._open(key, {"db_path": key}, turn)
        where = "" if i == 0 else f"on neighbour database {i} (same schema, other rows): "
        left = self.timeout_s - self.spent_s
        start = time.perf_counter()
        try:
            if left <= 0:
                raise ToolError(f"the query ran past the verdict's time limit of {self.timeout_s:g} s in all.")
            self._results.append(fetch_rows(db, self._sql, left, self._limits))
        except ToolError as exc:
            self.why, self.failed_at = where + str(exc)[:200], i
        except ResultTooLarge as exc:
            self.why, self.failed_at = f"{where}result too large to compare: {exc}", i
        except InfraError as exc:
            raise JudgeError(f"task {turn.task.id}: {exc}") from None
        finally:
            self.spent_s += time.perf_counter() - start


#: A prediction's cache key: the databases (the gold's), the submitted text, the result bounds.
PredictionKey = tuple[tuple[str, ...], str, ResultLimits]


def db_key(meta: Mapping[str, Any]) -> str:
    return str(meta.get("db_dsn") or meta.get("db_path"))


class _ThreadDatabases:
    """One thread's open databases by key; referenced weakly by the suite, so a thread's end frees them."""

    __slots__ = ("__weakref__", "dbs")

    def __init__(self) -> None:
        self.dbs: dict[str, Database] = {}


class Suite:
    """Per-thread open databases, the gold results (they never change) and the recent submitted
    queries' results (the databases are read-only); both caches bounded by bytes held.

    The open databases are closed when the last user (an SQL env) releases the suite; see the
    module docstring."""

    def __init__(self, gold_bytes: int = 256 << 20, recent_bytes: int = 64 << 20) -> None:
        self._local = threading.local()
        self._gold: ByteLRU[tuple[str, str, ResultLimits, int], Gold] = ByteLRU(gold_bytes)
        self._recent: ByteLRU[PredictionKey, Prediction] = ByteLRU(recent_bytes)
        self._lock = threading.Lock()  # guards the per-thread caches (closed from any thread) and _users
        self._threads: weakref.WeakSet[_ThreadDatabases] = weakref.WeakSet()
        self._users = 0

    def acquire(self) -> None:
        """Count one user (an SQL env) of the suite's connections."""
        with self._lock:
            self._users += 1

    def release(self) -> None:
        """Give back one use; the last one closes every thread's open databases."""
        with self._lock:
            self._users = max(0, self._users - 1)
            last = self._users == 0
        if last:
            self.close_connections()

    def close_connections(self, which: Callable[[str], bool] | None = None) -> int:
        """Close the open databases of every thread (those whose key ``which`` accepts, if given);
        a later verdict opens them again. Returns how many were closed.

        A database in use by another thread's verdict at that moment fails it (an infrastructure
        error), so this runs when no env uses the suite, or on databases whose server has stopped.
        """
        closing: list[Database] = []
        with self._lock:
            for held in list(self._threads):
                for key in [k for k in held.dbs if which is None or which(k)]:
                    closing.append(held.dbs.pop(key))
        for db in closing:
            db.close()
        return len(closing)

    def get(self, turn: Turn) -> Database:
        """The turn's own database, open in this thread."""
        return self._open(db_key(turn.task.meta), turn.task.meta, turn)

    def _open(self, key: str, meta: Mapping[str, Any], turn: Turn) -> Database:
        held: _ThreadDatabases | None = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = _ThreadDatabases()
            with self._lock:
                self._threads.add(held)
        with self._lock:
            db = held.dbs.get(key)
            evicted = held.dbs.pop(next(iter(held.dbs))) if db is None and len(held.dbs) >= MAX_OPEN else None
        if evicted is not None:
            evicted.close()
        if db is None:
            try:
                db = open_database(meta)
            except InfraError as exc:
                raise JudgeError(f"task {turn.task.id}: {exc}") from None
            with self._lock:
                held.dbs[key] = db
        return db

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
            ordered = gold_orders(gold_sql, dialect_of(turn))
            main = self._gold_on(turn, self.get(turn), sql, timeout_s, limits)
            keys, results = [key[0]], [main]
            paths = self._neighbour_paths(turn, count)
            for path in paths:
                self._gold_neighbour(turn, path, sql, timeout_s, limits, keys, results)
            if len(results) > 1 and all(results_match(main, r, ordered=ordered) for r in results[1:]):
                # the gold gives the same rows on every neighbour: they cannot tell a forgery from it,
                # so try a few more and keep the first where its rows differ
                base = len(results)
                for path in self._neighbour_paths(turn, count + EXTRA_NEIGHBOURS)[count:]:
                    if self._gold_neighbour(turn, path, sql, timeout_s, limits, keys, results) and not (
                        results_match(main, results[-1], ordered=ordered)
                    ):
                        break
                    del keys[base:], results[base:]
            hit = Gold(tuple(keys), tuple(results), ordered)
            self._gold.put(key, hit, hit.nbytes)
        return hit

    def _gold_neighbour(
        self,
        turn: Turn,
        path: Path,
        sql: str,
        timeout_s: float,
        limits: ResultLimits,
        keys: list[str],
        results: list[Result],
    ) -> bool:
        """Run the gold on the neighbour at ``path`` and add its result; False when the gold fails there
        (it uses what the neighbour lacks: that neighbour cannot judge this task)."""
        try:
            db = self._open(str(path), {"db_path": str(path)}, turn)
            results.append(fetch_rows(db, sql, timeout_s, limits))
        except (ToolError, ResultTooLarge):
            return False
        except InfraError as exc:
            raise JudgeError(f"task {turn.task.id}: a neighbour database failed: {exc}") from None
        keys.append(str(path))
        return True

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
    def _neighbour_paths(turn: Turn, count: int) -> list[Path]:
        meta = turn.task.meta
        if count <= 0 or meta.get("db_dsn") or not meta.get("db_path"):
            return []  # neighbours are SQLite files; a server database is judged on itself
        try:
            return list(neighbours(str(meta["db_path"]), count))
        except (OSError, InfraError) as exc:
            raise JudgeError(f"task {turn.task.id}: cannot build neighbour databases: {exc}") from None

    def predicted(self, turn: Turn, gold: Gold, timeout_s: float, limits: ResultLimits) -> Prediction:
        """The submitted query's :class:`Prediction` on ``gold``'s databases, shared by the judges.

        The judges of one turn read the same one: the query runs at most once per database, under
        one budget of ``timeout_s`` (the first judge's) for all of them. The last prediction of
        each thread is always kept, and recent ones while they fit the cache.
        """
        sql = turn.answer or ""
        key: PredictionKey = (gold.keys, sql, limits)
        last = getattr(self._local, "last", None)
        if last is not None and last[0] == key:
            return last[1]
        hit = self._recent.get(key)
        if hit is None:
            hit = Prediction(self, key, turn, repair_spacing(sql), timeout_s)
            self._recent.put(key, hit, hit.nbytes)
        self._local.last = (key, hit)
        return hit

    def _resize(self, prediction: Prediction) -> None:
        """Account for ``prediction``'s new results in the cache (dropped from it when too large)."""
        if prediction.nbytes > self._recent.max_bytes:
            self._recent.discard(prediction.key)
        else:
            self._recent.put(prediction.key, prediction, prediction.nbytes)


def dialect_of(turn: Turn) -> str:
    """The SQL dialect of the turn's database: ``meta["db_dialect"]``, else PostgreSQL for a
    ``db_dsn`` and SQLite for a ``db_path``."""
    meta = turn.task.meta
    return str(meta.get("db_dialect") or ("postgres" if meta.get("db_dsn") else "sqlite"))
