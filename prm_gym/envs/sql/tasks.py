"""Text-to-SQL tasks: a seeded generator over SQLite databases, and a Spider/BIRD loader.

A SQL task is a :class:`prm_gym.core.tasks.Task` whose ``prompt`` is the question, whose ``answer`` is
the gold SQL and whose ``meta`` holds ``db_path`` (the ``.sqlite`` file), ``db_id`` and, for
generated tasks, ``level`` (1 filter, 2 join, 3 group by, 4 nested) and ``schema``.

Generated databases are written once to a cache directory under names that encode schema, seed
and generator version (atomically, so concurrent processes agree) and reused afterwards.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prm_gym.core.errors import TaskError
from prm_gym.core.progress import bar, track
from prm_gym.core.records import read_records
from prm_gym.core.tasks import Task, TaskSet, generated_once, require, task_from_record
from prm_gym.envs.sql.db import DatabaseError, SQLiteDatabase, check_sqlite_file
from prm_gym.envs.sql.schemas import SCHEMAS

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
    wanted = [(s, k) for s in schemas for k in range(dbs_per_schema)]
    dbs = [(s, k, build_database(s, seed * 1000 + k, cache_dir)) for s, k in track(wanted, desc="SQL databases")]
    opened = {path: SQLiteDatabase(path) for _, _, path in dbs}
    rng = np.random.default_rng([seed, _SPLITS[split], GENERATOR_VERSION])
    tasks: list[Task] = []
    progress = bar(n, "SQL tasks", "task")
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
            progress.update(1)
    finally:
        progress.close()
        for db in opened.values():
            db.close()
    return TaskSet(tasks, name=f"generated sql ({split}, seed {seed})")


def find_database(db_dir: Path, db_id: str) -> Path | None:
    """``db_dir/<db_id>/<db_id>.sqlite`` (Spider/BIRD layout) or ``db_dir/<db_id>.sqlite``."""
    for cand in (db_dir / db_id / f"{db_id}.sqlite", db_dir / f"{db_id}.sqlite", db_dir / db_id / f"{db_id}.db"):
        if cand.is_file():
            return cand
    return None


#: Spider / BIRD folder layouts: the task files of each split (``.json``, or ``.jsonl`` when a
#: conversion left one), then the database folders tried.
_SPLIT_FILES = {
    "train": ("train_spider", "train_others", "train"),
    "dev": ("dev",),
    "test": ("test",),
}
_SPLIT_ALIASES = {"validation": "dev"}
#: Files of a Spider/BIRD folder that describe schemas, not tasks (``tables.json``, ``test_tables.json``).
SCHEMA_FILES = ("tables", "train_tables", "dev_tables", "test_tables")


def _task_file(folder: Path, stem: str) -> Path | None:
    for suffix in (".json", ".jsonl"):
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    return None


def sql_folder(folder: Path, split: str | None) -> tuple[list[Path], Path]:
    """The task files and database folder of ``split`` in a Spider or BIRD folder.

    Spider: ``train_spider.json`` + ``train_others.json`` / ``dev.json`` / ``test.json`` with
    ``database/`` (``test_database/`` for test); BIRD: ``train.json`` / ``dev.json`` with
    ``train_databases/`` / ``dev_databases/``. A folder with one split's file uses it whatever
    ``split`` says (``validation`` means ``dev``).

    Raises:
        TaskError: no task file for the split (naming the splits present).
    """
    found = {name: [_task_file(folder, stem) for stem in stems] for name, stems in _SPLIT_FILES.items()}
    present = {name: [f for f in files if f is not None] for name, files in found.items()}
    present = {name: files for name, files in present.items() if files}
    want = _SPLIT_ALIASES.get(str(split), str(split))
    if not present:
        raise TaskError(
            f"{folder}: not a Spider or BIRD folder (no train_spider.json, train.json, dev.json or test.json, "
            "nor .jsonl)."
        )
    if want not in present:
        if len(present) != 1:
            raise TaskError(f"{folder}: no {split!r} split; its splits are {sorted(present)}; pass split=<one>.")
        want = next(iter(present))
    for name in (f"{want}_databases", f"{want}_database", "database"):
        if (folder / name).is_dir():
            return present[want], folder / name
    raise TaskError(f"{folder}: no database folder ({want}_databases/ or database/); unzip the databases there.")


def sql_task(
    rec: Mapping[str, Any], where: str, default_id: str, db_dir: Path | None, on_missing: str = "error"
) -> Task | None:
    """A task from a Spider (``question``, ``query``, ``db_id``) or BIRD (``question``, ``SQL``,
    ``db_id``, ``evidence``, ``question_id``, ``difficulty``) record, its database found under
    ``db_dir``; a record without ``db_id`` is a plain task whose ``meta`` names its ``db_path``.
    None when the database is missing and ``on_missing == "skip"``."""
    if "db_id" not in rec:
        return task_from_record(rec, where, default_id)
    db_id = str(rec["db_id"])
    gold = rec.get("query", rec.get("SQL"))
    if not isinstance(gold, str):
        raise TaskError(f"{where}: missing field 'query' (Spider) or 'SQL' (BIRD).")
    question = str(require(rec, "question", where))
    if db_dir is None:
        raise TaskError(f"{where}: db_id {db_id!r} needs the folder of databases; pass db_dir=.")
    db_path = find_database(db_dir, db_id)
    problem = f"no database for db_id {db_id!r} under {str(db_dir)!r}" if db_path is None else None
    if db_path is not None:
        try:
            check_sqlite_file(db_path)
        except DatabaseError as exc:
            problem = str(exc)
    if problem:
        if on_missing == "skip":
            return None
        raise TaskError(f"{where}: {problem}; pass db_dir= or on_missing='skip'.")
    evidence = str(rec.get("evidence") or "")
    prompt = f"{question}\nHint: {evidence}" if evidence else question
    meta = {"db_path": str(db_path), "db_id": db_id}
    meta.update({k: rec[k] for k in ("difficulty", "hardness") if k in rec})
    return Task(str(rec.get("question_id", rec.get("id", f"{db_id}-{default_id}"))), prompt, gold, meta)


def sql_reader(db_dir: Path | None) -> Callable[[Mapping[str, Any], str, str], Task]:
    """The SQL env's reader of one record given in memory (:func:`sql_task`; a missing database raises)."""

    def read(rec: Mapping[str, Any], where: str, default_id: str) -> Task:
        task = sql_task(rec, where, default_id, db_dir)
        assert task is not None  # on_missing="error" raises instead of skipping
        return task

    return read


def load_sql_file(
    path: str | Path,
    db_dir: str | Path | None = None,
    *,
    on_missing: str = "error",
    split: str | None = None,
    check: Callable[[Mapping[str, Any], str, str], Any] | None = None,
) -> TaskSet:
    """Load Spider or BIRD tasks (:func:`sql_task`) from a ``.json``/``.jsonl``/``.parquet`` file
    or a Spider/BIRD folder (:func:`sql_folder`).

    Args:
        path: the task file, a Spider/BIRD folder, or a folder of data files (a ``save_to_disk``
            folder, hub parquet files: give ``db_dir``).
        db_dir: the folder of databases (default: ``database/`` next to the task file, or inside
            the folder given).
        on_missing: ``"error"`` or ``"skip"`` for tasks whose database is missing or not SQLite.
        split: the split of a dataset folder.
        check: called with each record first (``record, where, default_id``); it raises on a
            record that is not what the caller expects (e.g. BIRD's ``SQL`` in a Spider load).

    Raises:
        TaskError: a malformed record, or a missing / non-SQLite database with ``on_missing="error"``.
    """
    if on_missing not in ("error", "skip"):
        raise TaskError(f"on_missing must be 'error' or 'skip', got {on_missing!r}.")
    p = Path(path).expanduser()
    layout = p.is_dir() and any(_task_file(p, stem) for stems in _SPLIT_FILES.values() for stem in stems)
    if layout:  # a Spider / BIRD release folder; any other folder is read as data (save_to_disk, hub files)
        files, own_dbs = sql_folder(p, split)
    else:  # a task file: database/ beside it; a data folder: its own database/
        files, own_dbs = [p], (p if p.is_dir() else p.parent) / "database"
    folder = Path(db_dir) if db_dir is not None else own_dbs
    tasks: list[Task] = []
    for f in files:
        for where, key, rec in read_records(f, split, ignore=SCHEMA_FILES):
            if check is not None:
                check(rec, where, key)
            task = sql_task(rec, where, key if len(files) == 1 else f"{f.stem}-{key}", folder, on_missing)
            if task is not None:
                tasks.append(task)
    return TaskSet(tasks, name=str(p))
