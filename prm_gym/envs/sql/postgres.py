"""PostgreSQL backend of the SQL env (optional: ``pip install prm-gym[sql-postgres]``).

A task points at a server with ``meta["db_dsn"]`` (``"host=/run/pg dbname=shop user=agent"``).
Every query runs in its own read-only transaction with a ``statement_timeout`` and is rolled
back afterwards. It runs as a server-side cursor (``DECLARE ... CURSOR FOR``, sent with the
extended protocol): only a query can run that way, never a second statement smuggled behind it
(``SET statement_timeout = 0; SELECT pg_sleep(100)``), and only the rows asked for reach the
client. A watchdog cancels the query from the client a moment past its limit should the server
not stop it. Give the env a role that may only ``SELECT``: a read-only transaction cannot
write tables, but server-side functions of a superuser can reach the file system.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from typing import Any

from prm_gym.core.errors import ToolError
from prm_gym.envs.sql.db import DatabaseError, QueryResult, format_result, quote_ident

#: Statements that are not queries (a cursor cannot run them: PostgreSQL calls them a syntax error).
_NOT_A_QUERY = re.compile(
    r"(\s|--[^\n]*\n|/\*.*?\*/)*(insert|update|delete|merge|create|drop|alter|truncate|grant|revoke|set|reset|copy"
    r"|call|do|vacuum|analyze|cluster|reindex|lock|listen|notify|load|discard|begin|commit|rollback|prepare|execute"
    r"|comment|security|refresh|import)\b",
    re.IGNORECASE | re.DOTALL,
)
#: Seconds past a query's limit after which the client cancels it, should the server not have.
CANCEL_GRACE_S = 1.0


class PostgresDatabase:
    """One PostgreSQL database reached through ``dsn``, used read-only.

    Raises:
        DatabaseError: psycopg is not installed or the server cannot be reached.
    """

    def __init__(self, dsn: str, *, name: str = "postgres"):
        try:
            import psycopg
        except ImportError:
            raise DatabaseError("PostgreSQL tasks need psycopg: pip install 'prm-gym[sql-postgres]'.") from None
        self.name = name
        self.dsn = dsn
        self._psycopg = psycopg
        self._conn: Any = self._connect()

    def _connect(self) -> Any:
        psycopg = self._psycopg
        try:
            conn = psycopg.connect(self.dsn, autocommit=False, connect_timeout=10)
        except psycopg.Error as exc:
            raise DatabaseError(f"cannot connect to PostgreSQL database {self.name!r}: {exc}".strip()) from None
        conn.read_only = True
        return conn

    def query(self, sql: str, *, max_rows: int | None = None, timeout_s: float = 5.0) -> QueryResult:
        """Run one read-only query (see :meth:`prm_gym.envs.sql.db.SQLiteDatabase.query`)."""
        if self._conn is None:
            raise DatabaseError(f"database {self.name!r} is closed.")
        psycopg = self._psycopg
        start = time.perf_counter()
        watchdog = threading.Timer(timeout_s + CANCEL_GRACE_S, self._cancel)
        try:
            limit = f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}"
            try:
                self._conn.execute(limit)
            except psycopg.OperationalError as exc:  # before the agent's query: the server dropped this
                self._recover(exc)  # connection (it restarted); a new one, or DatabaseError if it is down
                self._conn.execute(limit)
            watchdog.start()
            with self._conn.cursor(name="prm_query") as cur:
                cur.execute(sql.encode("utf-8"))
                rows = cur.fetchall() if max_rows is None else cur.fetchmany(max_rows + 1)  # one FETCH: one timeout
                columns = tuple(d.name for d in cur.description or ())
        except psycopg.Error as exc:
            state = getattr(exc, "sqlstate", None) or ""
            if self._conn.closed or self._conn.broken or isinstance(exc, psycopg.OperationalError):
                self._recover(exc)  # the server is fine: the agent's query ended its own session
            if state == "57014":
                raise ToolError("the query ran past its time limit and was stopped.") from None
            if state in ("25006", "42501") or (state == "42601" and _NOT_A_QUERY.match(sql)):
                raise ToolError("only read-only queries are allowed; the statement was refused.") from None
            raise ToolError(f"{type(exc).__name__}: {str(exc).strip()}") from None
        finally:
            watchdog.cancel()
            self._end_transaction()
        truncated = max_rows is not None and len(rows) > max_rows
        rows = rows[:max_rows] if max_rows is not None else rows
        return QueryResult(columns, tuple(tuple(r) for r in rows), truncated, time.perf_counter() - start)

    def _end_transaction(self) -> None:
        """Roll the query's transaction back; a connection that does not return to idle (its
        rollback failed, as after a query that ran out of temporary space) is replaced, so no later
        query, a judge's included, runs in an aborted transaction and reads as the agent's error."""
        conn = self._conn
        if conn.closed or conn.broken:
            return  # replaced by _recover, or the next query recovers
        with contextlib.suppress(self._psycopg.Error):
            conn.rollback()
        if conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(self._psycopg.Error):
                conn.close()
            self._recover(RuntimeError("the connection did not return to idle after a failed query"))

    def _cancel(self) -> None:
        """Ask the server to stop the running query (the watchdog's last resort)."""
        conn = self._conn
        if conn is not None and not conn.closed:
            # the query may have ended meanwhile, or the server be gone (the query then fails itself)
            with contextlib.suppress(self._psycopg.Error):
                conn.cancel()

    def _recover(self, exc: Exception) -> None:
        """After a failure that could be the server's: reconnect, or raise DatabaseError if it is down.

        Decided by the server's state (a fresh connection answers ``SELECT 1``), never by the
        error's text: a query that terminates its own backend (``pg_terminate_backend``) or runs
        out of resources is the agent's error once the server is shown to be up.
        """
        fresh = self._connect()
        try:
            with fresh.cursor() as cur:
                cur.execute("SELECT 1")
            fresh.rollback()
        except self._psycopg.Error as probe:
            fresh.close()
            raise DatabaseError(f"PostgreSQL database {self.name!r} failed: {exc} ({probe})".strip()) from None
        if self._conn.closed or self._conn.broken:
            self._conn.close()
            self._conn = fresh
        else:
            fresh.close()

    def tables(self) -> list[str]:
        res = self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name"
        )
        return [str(r[0]) for r in res.rows]

    def describe(self, table: str) -> str:
        if table not in self.tables():
            raise ToolError(f"no table named {table!r}; tables: {self.tables()}.")
        lit = "'" + table.replace("'", "''") + "'"
        cols = self.query(
            "SELECT column_name, data_type FROM information_schema.columns "
            f"WHERE table_schema = current_schema() AND table_name = {lit} ORDER BY ordinal_position"
        ).rows
        lines = [f"TABLE {quote_ident(table)}"] + [f"  {quote_ident(c)} {t}" for c, t in cols]
        lines += ["Sample rows:", format_result(self.query(f"SELECT * FROM {quote_ident(table)} LIMIT 3"))]
        return "\n".join(lines)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
