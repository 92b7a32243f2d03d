"""The SQL env's task databases served by PostgreSQL.

:class:`PostgresHost` is one server the episodes query: a throwaway server it starts itself
(:class:`prm_gym.envs.sql.pgserver.PostgresServer`) or a running one named by a DSN whose user
may create databases and roles. Each task's SQLite file is copied once into a database of its own
(named after the file, its size and its modification time, so a server keeps serving it across
runs), with every table and column name lower-cased (unquoted names then work in any case, as in
SQLite) and each column typed from its SQLite declaration and values (``bigint``, ``double
precision``, ``numeric``, ``bytea``, ``text``). Agents connect as a login role of this host that may
only read: it belongs to ``prm_reader`` (``CONNECT``, ``USAGE`` on ``public`` and ``SELECT`` on
its tables), its transactions default to read-only, with a 60 s statement limit as a backstop
behind the per-query one.

Hosts are shared within a process (:func:`acquire_host`, :func:`release_host`): the envs of a
run, their forks and the judges use one server, stopped when the last env using it closes.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
import sqlite3
import threading
from pathlib import Path
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.envs.sql.db import DatabaseError, check_sqlite_file, quote_ident
from prm_gym.envs.sql.pgserver import PostgresServer

READER_ROLE = "prm_reader"
_PSYCOPG_HINT = "the PostgreSQL backend needs psycopg: pip install 'prm-gym[sql-postgres]'"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ConfigError(f"sql backend 'postgres': {_PSYCOPG_HINT}.") from None
    return psycopg


def database_name(path: str | Path) -> str:
    """The PostgreSQL database name of the SQLite file at ``path`` (stable while the file is unchanged)."""
    p = Path(path).resolve()
    st = p.stat()
    digest = hashlib.sha1(f"{p}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:10]
    stem = re.sub(r"[^a-z0-9_]+", "_", p.stem.lower())[:40]
    return f"{stem}_{digest}"


def column_type(conn: sqlite3.Connection, table: str, column: str, declared: str) -> str:
    """The PostgreSQL type of one SQLite column: its declared affinity, if every value fits, else text."""
    decl = declared.upper()
    if "INT" in decl:
        kind, fits = "bigint", ("integer", "integer")
    elif any(k in decl for k in ("CHAR", "CLOB", "TEXT")):
        return "text"
    elif "BLOB" in decl:
        kind, fits = "bytea", ("blob", "blob")
    elif any(k in decl for k in ("REAL", "FLOA", "DOUB")):
        kind, fits = "double precision", ("integer", "real")
    elif decl:
        kind, fits = "numeric", ("integer", "real")
    else:
        return "text"
    allowed = ", ".join(f"'{f}'" for f in fits)  # SQLite's typeof() names the value fits
    bad = conn.execute(
        f"SELECT 1 FROM {quote_ident(table)} WHERE typeof({quote_ident(column)}) NOT IN ('null', {allowed}) LIMIT 1"
    ).fetchone()
    return "text" if bad else kind


def _cell(value: Any, kind: str) -> Any:
    if value is None or kind != "text":
        return value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def copy_tables(src: sqlite3.Connection, dst: Any) -> list[str]:
    """Create every table of ``src`` in the PostgreSQL connection ``dst`` and copy its rows, with its
    primary key where the data keeps it; the table names."""
    import psycopg

    names = [
        str(r[0])
        for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    ]
    for table in names:
        info = list(src.execute(f"PRAGMA table_info({quote_ident(table)})"))
        cols = [(str(r[1]), str(r[2] or "")) for r in info]
        kinds = [column_type(src, table, c, d) for c, d in cols]
        target = quote_ident(table.lower())
        col_list = ", ".join(quote_ident(c.lower()) for c, _ in cols)
        defs = ", ".join(f"{quote_ident(c.lower())} {k}" for (c, _), k in zip(cols, kinds, strict=True))
        dst.execute(f"CREATE TABLE {target} ({defs})".encode())
        select = ", ".join(quote_ident(c) for c, _ in cols)
        with dst.cursor().copy(f"COPY {target} ({col_list}) FROM STDIN".encode()) as copy:
            for row in src.execute(f"SELECT {select} FROM {quote_ident(table)}"):
                copy.write_row([_cell(v, k) for v, k in zip(row, kinds, strict=True)])
        key = [quote_ident(str(r[1]).lower()) for r in sorted(info, key=lambda r: r[5]) if r[5]]
        if key:  # PostgreSQL lets a GROUP BY on the key select the table's other columns
            try:
                with dst.transaction():
                    dst.execute(f"ALTER TABLE {target} ADD PRIMARY KEY ({', '.join(key)})".encode())
            except psycopg.Error:
                pass  # the data breaks its declared key (as Spider's can): the table gets none
    return names


class PostgresHost:
    """A PostgreSQL server holding the task databases, and the read-only role agents use.

    Args:
        dsn: a running server's connection string (its user may create databases and roles);
            None starts a throwaway server.
        bin_dir: the folder of ``initdb`` and ``pg_ctl`` for a throwaway server.

    Raises:
        ConfigError: psycopg or the server binaries are missing, or ``dsn`` does not connect.
        DatabaseError: the throwaway server failed to start.
    """

    def __init__(self, dsn: str | None = None, *, bin_dir: str | Path | None = None):
        self.psycopg = _psycopg()
        self.server = PostgresServer(bin_dir) if dsn is None else None
        self.admin_dsn = dsn if dsn is not None else self.server.admin_dsn  # type: ignore[union-attr]
        self.role = f"prm_agent_{secrets.token_hex(6)}"
        self._password = secrets.token_hex(16)
        self._loaded: dict[str, str] = {}
        self._lock = threading.Lock()
        try:
            self._create_role()
        except BaseException:
            if self.server is not None:
                self.server.stop()
            raise

    def _admin(self, dbname: str | None = None) -> Any:
        psycopg = self.psycopg
        kw = {"dbname": dbname} if dbname else {}
        try:
            return psycopg.connect(self.admin_dsn, autocommit=True, connect_timeout=10, **kw)
        except psycopg.Error as exc:
            field = "pg_dsn" if self.server is None else "the throwaway server"
            raise ConfigError(f"{field}: cannot connect to PostgreSQL ({str(exc).strip()}); check the DSN.") from None

    def _create_role(self) -> None:
        from psycopg import sql

        role, reader = sql.Identifier(self.role), sql.Identifier(READER_ROLE)
        with self._admin() as conn:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER_ROLE,)).fetchone() is None:
                with contextlib.suppress(self.psycopg.errors.DuplicateObject):  # or another process made it first
                    conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(reader))
            conn.execute(
                sql.SQL(
                    "CREATE ROLE {} LOGIN PASSWORD {} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION IN ROLE {}"
                ).format(role, sql.Literal(self._password), reader)
            )
            conn.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(role))
            conn.execute(sql.SQL("ALTER ROLE {} SET statement_timeout = '60s'").format(role))
            superuser = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
            if superuser and superuser[0]:
                conn.execute(sql.SQL("ALTER ROLE {} SET temp_file_limit = '1GB'").format(role))

    def agent_dsn(self, dbname: str) -> str:
        """The connection string agents and judges use for database ``dbname`` (read-only role)."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(self.admin_dsn, dbname=dbname, user=self.role, password=self._password)

    def agent_dsns(self) -> frozenset[str]:
        """The agent DSNs of the databases loaded so far (what judges may hold connections to)."""
        with self._lock:
            names = list(self._loaded.values())
        return frozenset(self.agent_dsn(n) for n in names)

    def load(self, path: str | Path) -> str:
        """The agent DSN of the SQLite database at ``path``, copied into the server on first use.

        Raises:
            DatabaseError: the file is not an SQLite database or the copy failed.
        """
        key = str(Path(path).resolve())
        with self._lock:
            if key not in self._loaded:
                self._loaded[key] = self._copy(check_sqlite_file(path))
            return self.agent_dsn(self._loaded[key])

    def _copy(self, path: Path) -> str:
        from psycopg import sql

        name = database_name(path)
        with self._admin() as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                return name
            tmp = f"{name[:40]}_load_{secrets.token_hex(4)}"
            create = sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'")
            conn.execute(create.format(sql.Identifier(tmp)))
            try:
                self._fill(path, tmp)
                conn.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(tmp), sql.Identifier(name))
                )
            except self.psycopg.errors.DuplicateDatabase:
                pass  # another process loaded the same file meanwhile: theirs is used
            finally:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(tmp)))
        return name

    def _fill(self, path: Path, dbname: str) -> None:
        from psycopg import sql

        db, reader = sql.Identifier(dbname), sql.Identifier(READER_ROLE)
        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            with self._admin(dbname) as conn, conn.transaction():
                copy_tables(src, conn)
                conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(db))
                conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
                conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, reader))
                conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(reader))
                conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(reader))
        except (sqlite3.Error, self.psycopg.Error) as exc:
            raise DatabaseError(f"copying {str(path)!r} into PostgreSQL failed: {exc}") from None
        finally:
            src.close()

    def ensure_running(self) -> None:
        """Start the throwaway server again if it died (its databases and roles are kept, so the
        tasks' DSNs still work); nothing for a DSN's server, which is not ours to start.

        Raises:
            DatabaseError: it did not start.
        """
        if self.server is not None and not self.server.alive:
            self.server.restart()

    def close(self) -> None:
        """Stop the throwaway server, or drop this host's role from the DSN's server."""
        if self.server is not None:
            self.server.stop()
            return
        from psycopg import sql

        try:
            with self._admin() as conn:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(self.role)))
        except (ConfigError, self.psycopg.Error):
            pass  # the server went away or sessions of the role linger: nothing is left to protect


_HOSTS: dict[tuple[str | None, str | None], list[Any]] = {}
_HOSTS_LOCK = threading.Lock()


def acquire_host(dsn: str | None = None, bin_dir: str | Path | None = None) -> PostgresHost:
    """The process's host for ``dsn`` (or its throwaway server for ``bin_dir``), made on first use."""
    key = (dsn, None if dsn is not None or bin_dir is None else str(bin_dir))
    with _HOSTS_LOCK:
        entry = _HOSTS.get(key)
        if entry is None:
            entry = _HOSTS[key] = [PostgresHost(dsn, bin_dir=bin_dir), 0]
        entry[1] += 1
        host: PostgresHost = entry[0]
        return host


def release_host(host: PostgresHost) -> bool:
    """Give back one use of ``host``; the last one closes it (the throwaway server stops).
    True when this call closed it."""
    with _HOSTS_LOCK:
        for key, entry in list(_HOSTS.items()):
            if entry[0] is host:
                entry[1] -= 1
                if entry[1] > 0:
                    return False
                del _HOSTS[key]
                break
    host.close()
    return True
