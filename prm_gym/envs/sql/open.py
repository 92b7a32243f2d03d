"""Which database a SQL task points at: SQLite by path, PostgreSQL by DSN."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prm_gym.envs.sql.db import Database, DatabaseError, SQLiteDatabase
from prm_gym.envs.sql.postgres import PostgresDatabase


def open_database(meta: Mapping[str, Any], *, copy: bool = False) -> Database:
    """The database a SQL task points at: ``meta["db_dsn"]`` (PostgreSQL) or ``meta["db_path"]``.

    Raises:
        DatabaseError: the task names no database, or it cannot be opened.
    """
    if meta.get("db_dsn"):
        return PostgresDatabase(str(meta["db_dsn"]), name=str(meta.get("db_id", "postgres")))
    if meta.get("db_path"):
        return SQLiteDatabase(str(meta["db_path"]), copy=copy)
    raise DatabaseError("the task names no database; SQL tasks need meta['db_path'] or meta['db_dsn'].")
