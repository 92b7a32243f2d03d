"""prm/SQL-v0: multi-turn text-to-SQL against real databases, with execution and partial rewards."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from prm_gym.core.errors import ConfigError, InfraError
from prm_gym.core.tasks import Task, TaskSet, as_task_set
from prm_gym.core.tools import Tool
from prm_gym.envs.base import ToolEnv
from prm_gym.envs.datasets import file_loader
from prm_gym.envs.sql.db import Database, DatabaseError, format_result
from prm_gym.envs.sql.judges import DATABASES
from prm_gym.envs.sql.open import open_database
from prm_gym.envs.sql.pg import postgres_tasks
from prm_gym.envs.sql.pghost import PostgresHost, acquire_host, release_host
from prm_gym.envs.sql.tasks import generate_sql_tasks, load_sql_file, sql_reader
from prm_gym.rewards.combine import JudgeSpec

DEFAULT_JUDGE = (
    "rule/execution_match + 0.1*rule/sql_syntax + 0.1*rule/sql_schema_link"
    " + 0.1*rule/sql_result_overlap + 0.05*rule/sql_explore + 0.1*rule/format + 0.1*rule/tool"
)
INSTRUCTIONS = (
    "Explore the database with the tools list_tables, describe_table and run_query (read-only; "
    "long results are cut). When ready, reply with one final {dialect} query alone inside "
    "<answer></answer>, e.g. <answer>SELECT name FROM customers WHERE city = 'Oslo'</answer>."
)
#: The database engines the env runs on, by ``backend`` name, as the prompt names them.
BACKENDS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


class SQLEnv(ToolEnv):
    """Answer a question about a database by exploring it and submitting one SQL query.

    ## Description
    Each episode is one question about one database (generated shop / school / flights
    SQLite databases by default, or Spider/BIRD tasks with their ``.sqlite`` files). On each
    turn the agent calls tools (``list_tables``, ``describe_table``, ``run_query``) or submits
    its final query as ``<answer>SELECT ...</answer>``, which ends the episode. Every episode
    works on a guarded read-only connection (or a private in-memory copy, ``copy_db=True``):
    writes, ``ATTACH`` and pragma writes are refused, queries have a time limit and a row cap.

    With ``backend="postgres"`` the same tasks run on PostgreSQL: with no ``pg_dsn`` the env
    starts a throwaway server itself (``initdb`` and ``pg_ctl`` from Debian's ``postgresql``
    package, which ``make setup`` installs where apt exists; a private folder and unix socket,
    no TCP port), copies each task's SQLite database into it (table and column names
    lower-cased, columns typed from their declarations), and stops and removes it when the
    last env using it closes (and at interpreter exit). With ``pg_dsn`` it copies them into that
    server instead (its user must be able to create databases and roles). Agents and judges
    connect as a role that may only read; each query runs as a read-only server-side cursor
    under a statement timeout, with a client-side cancel as a backstop. The prompt names the
    dialect, gold queries are translated from SQLite's dialect by sqlglot, and the judges parse
    in PostgreSQL's. Missing server programs, psycopg or an unreachable ``pg_dsn`` raise a
    ``ConfigError`` with the fix when the env is made.

    ## Action Space
    ``UnicodeText(32768)``: the assistant's raw text for the turn. ``<think>`` blocks are ignored.

    ## Observation Space
    ``UnicodeText``: the question, database name, table list and instructions at ``reset``;
    afterwards tool results in ``<tool_response>`` blocks, or a format-error message.

    ## Rewards
    The default judge is ``DEFAULT_JUDGE``: ``reward_outcome`` is 1 when the submitted query's
    result equals the gold result (multiset, ordered when the gold query orders) on the task's
    database AND on 3 neighbour databases (Spider's test-suite evaluation: perturbed copies with
    the same schema and other rows, built once per database and cached), so rows copied from
    ``run_query``'s output as literals score 0; partial credit
    ``reward_syntax`` (0.1 x sqlglot-parses/executes), ``reward_schema`` (0.1 x table/column
    Jaccard with the gold query), ``reward_overlap`` (0.1 x row F1, the lowest over the same
    databases); per turn ``reward_explore``
    (0.05 x fraction of fresh successful tool calls), ``reward_format`` (-0.1 on a malformed
    turn) and ``reward_tool`` (-0.1 x fraction of failed calls). Weights are the judge
    expression's; see :mod:`prm_gym.envs.sql.judges`. The submitted query runs once per database
    for all the judges, under one deadline (5 s) for the whole verdict: a query past it scores 0.
    A gold result past the judges' bounds (1,000,000 rows, 128 MiB) is not scored: the turn's
    ``reward_status`` is ``"infra_error"`` and ``info["judge"]`` names the knobs to raise.

    ## Episode End
    Terminated when a query is submitted. Truncated after ``max_turns`` turns.

    ## Information
    ``task_id``, ``turn``, ``answer``, ``reward_<term>`` per term, ``reward_status``
    (``"infra_error"`` when the database or a judge failed), ``judge``, ``parse``, ``tool``;
    ``reset`` adds ``tools`` (OpenAI schemas) and ``db_id``.

    ## Arguments
    * ``tasks``: None for generated tasks; a Spider or BIRD folder (``dev.json`` and
      ``database/`` or ``dev_databases/``) or task file (``.json``, ``.jsonl``, ``.parquet``, with
      ``db_dir``); ``"dataset:spider:<folder>"`` / ``"dataset:bird:<folder>"``; a list of Tasks
      or of dicts with the same fields (and ``db_dir``); a TaskSet.
    * ``db_dir``: the folder of ``<db_id>/<db_id>.sqlite`` databases for a task file.
    * ``on_missing``: ``"error"`` (default) or ``"skip"``: leave out the tasks of a task file or
      folder whose database is missing or not SQLite.
    * ``split``: the generator's split, and the split of a Spider/BIRD folder (``train``, ``dev``).
    * ``num_tasks``, ``task_seed``, ``levels``, ``schemas``, ``cache_dir``: generator settings.
    * ``copy_db``: run each episode on a private in-memory copy (SQLite).
    * ``backend``: ``"sqlite"`` (default) or ``"postgres"``; ``pg_dsn``: a running PostgreSQL
      server to use instead of a throwaway one; ``pg_bin_dir``: the folder of ``initdb`` and
      ``pg_ctl`` (default: ``PATH``, then the newest ``/usr/lib/postgresql/*/bin``).
    * ``query_timeout_s``, ``max_rows``: limits of ``run_query``.
    * ``judge``: a judge expression; ``max_turns``: the turn budget (default 8).

    ## Version History
    * v0: initial version; ``backend="postgres"`` added (a throwaway server or ``pg_dsn``);
      execution match on neighbour databases too (literal rows no longer match), one deadline per
      verdict, result bounds raised to 1,000,000 rows.
    """

    def __init__(
        self,
        tasks: TaskSet | str | Path | Iterable[Task | dict[str, Any]] | None = None,
        *,
        db_dir: str | Path | None = None,
        on_missing: str = "error",
        split: str = "train",
        num_tasks: int = 500,
        task_seed: int = 0,
        levels: Sequence[int] = (1, 2, 3, 4),
        schemas: Sequence[str] = ("shop", "school", "flights"),
        cache_dir: str | Path | None = None,
        copy_db: bool = False,
        backend: str = "sqlite",
        pg_dsn: str | None = None,
        pg_bin_dir: str | Path | None = None,
        query_timeout_s: float = 2.0,
        max_rows: int = 20,
        judge: str | JudgeSpec = DEFAULT_JUDGE,
        max_turns: int = 8,
        **kwargs: Any,
    ):
        if query_timeout_s <= 0 or max_rows < 1:
            raise ConfigError(f"query_timeout_s must be > 0 and max_rows >= 1, got {query_timeout_s}, {max_rows}.")
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {sorted(BACKENDS)}, got {backend!r}.")
        if backend == "sqlite" and (pg_dsn or pg_bin_dir):
            raise ConfigError("pg_dsn and pg_bin_dir need backend='postgres'; set it, or drop them for SQLite.")
        dbs = Path(db_dir).expanduser() if db_dir is not None else None
        task_set = as_task_set(
            tasks,
            file_loader(
                "prm/SQL-v0",
                split,
                lambda p, s: load_sql_file(p, dbs, split=s, on_missing=on_missing),
                db_dir=dbs,
                on_missing=on_missing,
            ),
            lambda: generate_sql_tasks(num_tasks, task_seed, split, levels, schemas, cache_dir=cache_dir),
            sql_reader(dbs),
        )
        self.backend = backend
        self._pg: PostgresHost | None = None
        if backend == "postgres":  # made now, so a missing server fails here and not on every turn
            self._pg = acquire_host(pg_dsn or None, pg_bin_dir)
            try:
                task_set = postgres_tasks(task_set, self._pg)
            except BaseException:
                release_host(self._pg)
                raise
        self.copy_db = copy_db
        self.query_timeout_s = query_timeout_s
        self.max_rows = max_rows
        self._db: Database | None = None
        self._db_problem = ""
        tools = [Tool.from_function(f) for f in (self.list_tables, self.describe_table, self.run_query)]
        instructions = INSTRUCTIONS.format(dialect=BACKENDS[backend])
        try:
            super().__init__(
                task_set, tools=tools, judge=judge, max_turns=max_turns, instructions=instructions, **kwargs
            )
        except BaseException:
            self._release_pg()
            raise
        # the judges' process-wide connections (task and neighbour databases) close with the last SQL env
        DATABASES.acquire()
        self._holds_suite = True

    # ----------------------------------------------------------------- tools
    def list_tables(self) -> str:
        """List the tables of the database."""
        return "\n".join(self._database().tables()) or "(no tables)"

    def describe_table(self, table: str) -> str:
        """Show a table's columns, keys and three sample rows.

        Args:
            table: the table name, exactly as list_tables shows it.
        """
        return self._database().describe(table)

    def run_query(self, sql: str) -> str:
        """Run one read-only SQL query and see the first rows of its result.

        Args:
            sql: one SELECT statement, in the dialect the question names (SQLite or PostgreSQL).
        """
        result = self._database().query(sql, max_rows=self.max_rows, timeout_s=self.query_timeout_s)
        return format_result(result, max_chars=self.max_tool_output_chars)

    # ----------------------------------------------------------------- episode hooks
    def start_episode(self, task: Task) -> None:
        try:
            if self._pg is not None:  # a throwaway server that died in an earlier episode starts again
                self._pg.ensure_running()
            self._db, self._db_problem = open_database(task.meta, copy=self.copy_db), ""
        except InfraError as exc:
            self._db, self._db_problem = None, str(exc)

    def end_episode(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def prompt(self, task: Task) -> str:
        db_id = task.meta.get("db_id", "?")
        try:
            tables = ", ".join(self._database().tables())
        except InfraError as exc:
            tables = f"unavailable ({exc})"
        engine = BACKENDS[self.backend]
        return f"{engine} database {db_id} (tables: {tables}).\nQuestion: {task.prompt}\n\n{self.instructions}"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        info["db_id"] = str(self.task.meta.get("db_id", "")) if self.task else ""
        return obs, info

    def close(self) -> None:
        super().close()
        held, self._holds_suite = getattr(self, "_holds_suite", False), False
        if held:  # the last SQL env closes the judges' open databases (before a throwaway server stops)
            DATABASES.release()
        self._release_pg()

    def _release_pg(self) -> None:
        """Give the PostgreSQL host back (the last env using a throwaway server stops it, and the
        judges' connections to it are closed); idempotent."""
        host, self._pg = self._pg, None
        if host is not None:
            dsns = host.agent_dsns()
            if release_host(host) and dsns:
                DATABASES.close_connections(dsns.__contains__)

    def _database(self) -> Database:
        if self._db is None:
            raise DatabaseError(self._db_problem or "no database is open; call reset().")
        return self._db
