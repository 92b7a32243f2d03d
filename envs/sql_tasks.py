"""Text-to-SQL tasks: a seeded generator over SQLite databases, and a Spider/BIRD loader.

A SQL task is a :class:`prm_gym.core.tasks.Task` whose ``prompt`` is the question, whose ``answer`` is
the gold SQL and whose ``meta`` holds ``db_path`` (the ``.sqlite`` file), ``db_id`` and, for
generated tasks, ``level`` (1 filter, 2 join, 3 group by, 4 nested) and ``schema``.

Generated databases are written once to a cache directory under names that encode schema, seed
and generator version (atomically, so concurrent processes agree) and reused afterwards.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prm_gym.core.errors import TaskError
from prm_gym.core.tasks import Task, TaskSet, generated_once, read_jsonl, require
from prm_gym.envs.sql_schemas import SCHEMAS
from prm_gym.sandbox.sql_db import DatabaseError, SQLiteDatabase, check_sqlite_file

#: Bumped whenever a builder or template changes, so stale cached databases are not reused.
GENERATOR_VERSION = 1
_SPLITS = {"train": 0, "test": 1, "validation": 2}


def default_cache_dir() -> Path:
    """Where generated databases live: ``$PRM_SQL_CACHE`` or a per-user temp folder."""
    env = os.environ.get("PRM_SQL_CACHE")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"prm-gym-sql-{os.getuid()}"


def build_database(schema: str, seed: int, cache_dir: str | Path | None = None) -> Path:
    """The path of the generated ``schema`` database for ``seed``, building it if needed.

    Raises:
        TaskError: unknown schema.
    """
    if schema not in SCHEMAS:
        raise TaskError(f"unknown schema {schema!r}; choose from {sorted(SCHEMAS)}.")
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{schema}-{seed}-v{GENERATOR_VERSION}.sqlite"
    if path.is_file():
        try:
            check_sqlite_file(path)
            return path
        except DatabaseError:
            pass  # a damaged cache entry is rebuilt below
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        with conn:
            SCHEMAS[schema].build(conn, np.random.default_rng([seed, GENERATOR_VERSION]))
        conn.close()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def generate_sql_tasks(
    n: int = 500,
    seed: int = 0,
    split: str = "train",
    levels: Sequence[int] = (1, 2, 3, 4),
    schemas: Sequence[str] = ("shop", "school", "flights"),
    dbs_per_schema: int = 2,
    cache_dir: str | Path | None = None,
) -> TaskSet:
    """``n`` generated questions with gold SQL whose result is never empty.

    Generated once per process for each set of arguments (the cache folder resolved) and
    shared, with read-only ``meta``, while its database files exist.

    Raises:
        TaskError: an unknown split, level or schema, or ``n < 1``.
    """
    if split not in _SPLITS:
        raise TaskError(f"split must be one of {sorted(_SPLITS)}, got {split!r}.")
    if n < 1 or dbs_per_schema < 1:
        raise TaskError(f"n and dbs_per_schema must be >= 1, got {n} and {dbs_per_schema}.")
    bad = [s for s in schemas if s not in SCHEMAS] + [str(lv) for lv in levels if lv not in (1, 2, 3, 4)]
    if bad or not schemas or not levels:
        raise TaskError(f"unknown schemas/levels {bad}; schemas: {sorted(SCHEMAS)}, levels: 1-4.")
    folder = str(cache_dir) if cache_dir is not None else str(default_cache_dir())
    return _generate(n, seed, split, tuple(levels), tuple(schemas), dbs_per_schema, folder)


_DB_FILES: weakref.WeakKeyDictionary[TaskSet, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _databases_exist(tasks: TaskSet) -> bool:
    """Whether every database file of a generated set is still there (its paths gathered once)."""
    paths = _DB_FILES.get(tasks)
    if paths is None:
        paths = _DB_FILES[tasks] = tuple({str(t.meta["db_path"]) for t in tasks})
    return all(os.path.isfile(p) for p in paths)


@generated_once(still_valid=_databases_exist)
def _generate(
    n: int,
    seed: int,
    split: str,
    levels: tuple[int, ...],
    schemas: tuple[str, ...],
    dbs_per_schema: int,
    cache_dir: str,
) -> TaskSet:
    dbs = [(s, k, build_database(s, seed * 1000 + k, cache_dir)) for s in schemas for k in range(dbs_per_schema)]
    opened = {path: SQLiteDatabase(path) for _, _, path in dbs}
    rng = np.random.default_rng([seed, _SPLITS[split], GENERATOR_VERSION])
    tasks: list[Task] = []
    try:
        while len(tasks) < n:
            schema, k, path = dbs[int(rng.integers(len(dbs)))]
            level = int(levels[int(rng.integers(len(levels)))])
            templates = SCHEMAS[schema].templates[level]
            question, gold = templates[int(rng.integers(len(templates)))](rng)
            if not opened[path].query(gold, max_rows=1).rows:
                continue  # every generated question has a non-empty answer
            meta = {"db_path": str(path), "db_id": f"{schema}-{k}", "schema": schema, "level": level}
            tasks.append(Task(f"sql-{split}-{seed}-{len(tasks):05d}", question, gold, meta))
    finally:
        for db in opened.values():
            db.close()
    return TaskSet(tasks, name=f"generated sql ({split}, seed {seed})")


def find_database(db_dir: Path, db_id: str) -> Path | None:
    """``db_dir/<db_id>/<db_id>.sqlite`` (Spider/BIRD layout) or ``db_dir/<db_id>.sqlite``."""
    for cand in (db_dir / db_id / f"{db_id}.sqlite", db_dir / f"{db_id}.sqlite", db_dir / db_id / f"{db_id}.db"):
        if cand.is_file():
            return cand
    return None


def _records(path: Path) -> list[tuple[str, dict[str, Any]]]:
    if path.suffix == ".jsonl":
        return [(f"{path}:{ln}", rec) for ln, rec in read_jsonl(path)]
    if not path.is_file():
        raise TaskError(f"Task file {str(path)!r} does not exist (or is not a file).")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: not a JSON list of tasks ({exc}).") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise TaskError(f"{path}: expected a JSON list of objects (Spider/BIRD format).")
    return [(f"{path}[{k}]", rec) for k, rec in enumerate(data)]


def load_sql_file(path: str | Path, db_dir: str | Path | None = None, *, on_missing: str = "error") -> TaskSet:
    """Load Spider (``question``, ``query``, ``db_id``) or BIRD (``question``, ``SQL``, ``db_id``,
    optional ``evidence``) tasks from a ``.json`` list or a ``.jsonl`` file.

    Args:
        path: the task file.
        db_dir: the folder of databases (default: ``database/`` next to the task file).
        on_missing: ``"error"`` or ``"skip"`` for tasks whose database is missing or not SQLite.

    Raises:
        TaskError: a malformed record, or a missing / non-SQLite database with ``on_missing="error"``.
    """
    if on_missing not in ("error", "skip"):
        raise TaskError(f"on_missing must be 'error' or 'skip', got {on_missing!r}.")
    p = Path(path)
    folder = Path(db_dir) if db_dir is not None else p.parent / "database"
    tasks: list[Task] = []
    for where, rec in _records(p):
        db_id = str(require(rec, "db_id", where))
        gold = rec.get("query", rec.get("SQL"))
        if not isinstance(gold, str):
            raise TaskError(f"{where}: missing field 'query' (Spider) or 'SQL' (BIRD).")
        question = str(require(rec, "question", where))
        db_path = find_database(folder, db_id)
        problem = f"no database for db_id {db_id!r} under {str(folder)!r}" if db_path is None else None
        if db_path is not None:
            try:
                check_sqlite_file(db_path)
            except DatabaseError as exc:
                problem = str(exc)
        if problem:
            if on_missing == "skip":
                continue
            raise TaskError(f"{where}: {problem}; pass db_dir= or on_missing='skip'.")
        evidence = str(rec.get("evidence") or "")
        prompt = f"{question}\nHint: {evidence}" if evidence else question
        meta = {"db_path": str(db_path), "db_id": db_id}
        meta.update({k: rec[k] for k in ("difficulty", "hardness") if k in rec})
        tid = str(rec.get("question_id", rec.get("id", f"{db_id}-{len(tasks)}")))
        tasks.append(Task(tid, prompt, gold, meta))
    return TaskSet(tasks, name=str(p))
