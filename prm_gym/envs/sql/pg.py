"""prm/SQL-v0's tasks on PostgreSQL: each task's SQLite database copied into a server, the gold
query translated from SQLite's dialect to PostgreSQL's.

A converted task keeps its id, question and ``db_id``; its ``meta`` gains ``db_dsn`` (the read-only
role's connection string; ``db_path`` is dropped so every reader uses the server) and
``db_dialect = "postgres"`` (what the judges parse with), and its gold query is rewritten by sqlglot
(``sqlite`` to ``postgres``). A task that already names a server (``db_dsn``) is kept, in the
PostgreSQL dialect. Conversions are made once per task set and host, and shared by the envs and
forks that use them.
"""

from __future__ import annotations

import threading
import weakref

from prm_gym.core.errors import TaskError
from prm_gym.core.extras import missing_extra
from prm_gym.core.tasks import Task, TaskSet, frozen
from prm_gym.envs.sql.pghost import PostgresHost

try:
    import sqlglot
except ImportError as _exc:
    raise missing_extra(_exc, "sql", "prm/SQL-v0 (its SQL translation and judges)") from None

DIALECT = "postgres"
_SETS: weakref.WeakKeyDictionary[TaskSet, weakref.WeakKeyDictionary[PostgresHost, TaskSet]] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()


def to_postgres(sql: str) -> str:
    """``sql`` (SQLite's dialect) in PostgreSQL's; unchanged when sqlglot cannot read it."""
    try:
        out = sqlglot.transpile(sql, read="sqlite", write=DIALECT)
    except sqlglot.errors.SqlglotError:
        return sql
    return out[0] if len(out) == 1 else sql


def postgres_tasks(tasks: TaskSet, host: PostgresHost) -> TaskSet:
    """``tasks`` served by ``host`` (see the module doc); cached per task set and host.

    Raises:
        TaskError: a task names neither ``db_path`` nor ``db_dsn``.
        DatabaseError: a database could not be copied into the server.
    """
    with _LOCK:
        done = _SETS.setdefault(tasks, weakref.WeakKeyDictionary()).get(host)
        if done is not None:
            return done
    out = []
    for task in tasks:
        meta = dict(task.meta)
        if meta.get("db_dsn"):
            out.append(Task(task.id, task.prompt, task.answer, {**meta, "db_dialect": DIALECT}))
            continue
        if not meta.get("db_path"):
            raise TaskError(f"task {task.id}: names no database; SQL tasks need meta['db_path'] or meta['db_dsn'].")
        meta["db_dsn"] = host.load(str(meta.pop("db_path")))
        meta["db_dialect"] = DIALECT
        answer = to_postgres(task.answer) if isinstance(task.answer, str) else task.answer
        out.append(Task(task.id, task.prompt, answer, meta))
    converted = frozen(TaskSet(out, name=f"{tasks.name} (PostgreSQL)"))
    with _LOCK:
        _SETS[tasks][host] = converted
    return converted
