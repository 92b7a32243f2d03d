"""Text-to-SQL judges: execution match and partial credit in the spirit of Reasoning-SQL.

==========================  ========  ======  ==============================================
id                          term      scope   score
==========================  ========  ======  ==============================================
``rule/execution_match``    outcome   final   1.0 when the submitted query's result equals the
                                              gold query's on the task's database AND on each
                                              neighbour database (Spider's test-suite
                                              evaluation; columns in any order, rows a
                                              multiset, ordered when the gold's outermost
                                              query orders), else 0.0
``rule/sql_syntax``         syntax    final   0.5 if sqlglot parses one read-only query, plus
                                              0.5 if it executes without error, in [0, 1]
``rule/sql_schema_link``    schema    final   Jaccard overlap of the tables and columns used
                                              by the submitted and the gold query, in [0, 1]
``rule/sql_result_overlap`` overlap   final   F1 of the result rows (as multisets, columns
                                              lined up with the gold's), the lowest over the
                                              task's and the neighbour databases, in [0, 1]
``rule/sql_explore``        explore   turn    fraction of this turn's tool calls that
                                              succeeded and repeat no earlier call, in [0, 1]
==========================  ========  ======  ==============================================

The task names its database in ``meta`` (``db_path`` or ``db_dsn``, see :mod:`prm_gym.envs.sql.db`),
and the judges parse both queries in its dialect (``meta["db_dialect"]``; default PostgreSQL for
a ``db_dsn``, SQLite for a ``db_path``).
Test-suite evaluation (Zhong et al., 2020): a query can match the gold on one database by
accident or by forgery (``SELECT 'a' UNION ALL SELECT 'b'``, rows copied from ``run_query``'s
output). So both queries also run on ``neighbours`` (default :data:`NEIGHBOURS` = 3) perturbed
copies of the task's SQLite database, built once per database and cached on disk
(:mod:`prm_gym.envs.sql.neighbours`); only a query that computes the answer matches on all.
Where the gold's rows are the same on all of them, up to 5 more are tried and the first where
they differ joins (:data:`~prm_gym.envs.sql.suite.EXTRA_NEIGHBOURS`).
``neighbours=0`` compares on the task's database alone; a PostgreSQL task (``db_dsn``) is
compared on its own database only.

One deadline per verdict: the submitted query runs once per database per verdict, and every SQL
judge of the turn reads those results (:mod:`prm_gym.envs.sql.suite`); ``timeout_s`` (default
5 s) bounds all its runs together, so a slow answer costs one deadline however many judges and
databases. Running past it is the agent's (scored 0, the reason in the detail).

A failure of the gold query or of the database raises :class:`prm_gym.core.errors.JudgeError` (an
infrastructure failure); a submitted query that is broken, writes or times out scores 0. Both
queries have Spider's spacing typos repaired first (``> =`` runs as ``>=``). Results are fetched
and cached within bounds (:mod:`prm_gym.envs.sql.results`), by default 1,000,000 rows and
128 MiB per result (knobs ``max_rows`` / ``max_bytes``): a submitted result past them scores 0
with the reason; a gold result past them raises :class:`~prm_gym.envs.sql.suite.GoldTooLarge`
(a ``JudgeError``: the env reports ``reward_status = "infra_error"`` and the message, which names
the knobs, in ``info["judge"]``) and is never scored as the agent's 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import parse_action
from prm_gym.envs.sql.results import MatchMode, ResultLimits, aligned_columns, results_match
from prm_gym.envs.sql.results import row_f1 as _row_f1
from prm_gym.envs.sql.shape import SQLShape, gold_orders, gold_shape, is_read_only_query, sql_shape
from prm_gym.envs.sql.suite import Gold, GoldTooLarge, Prediction, Suite, dialect_of
from prm_gym.rewards.protocol import TurnJudge
from prm_gym.rewards.types import Turn, Verdict

#: Neighbour databases a verdict compares on besides the task's own (the judges' ``neighbours`` default).
NEIGHBOURS = 3
MAX_NEIGHBOURS = 16
__all__ = [  # the query-shape helpers live in prm_gym.envs.sql.shape and are re-exported here
    "DATABASES",
    "NEIGHBOURS",
    "ExecutionMatchJudge",
    "ExploreJudge",
    "GoldTooLarge",
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
    """Whether two results are equal (:func:`prm_gym.envs.sql.results.results_match`).

    ``"multiset"`` compares rows with their multiplicities, in order when ``ordered``;
    ``"set"`` compares the sets of distinct rows (the semantics of skyrl-gym's SQL reward).
    Values compare as Python values (``1 == 1.0``); the columns may come in another order.
    """
    return results_match(tuple(gold), tuple(pred), ordered=ordered, mode=mode)


def row_f1(gold: Sequence[Hashable], pred: Sequence[Hashable]) -> float:
    """F1 of the rows of two results taken as multisets; 1.0 when both are empty."""
    return _row_f1(gold, pred)


#: The databases, gold results and per-verdict results of the submitted queries (:mod:`prm_gym.envs.sql.suite`).
DATABASES = Suite()


class _SQLJudge(TurnJudge):
    """Args: ``timeout_s``, the one deadline of the submitted query over all the databases of a
    verdict; ``max_rows`` and ``max_bytes`` bound each result compared; ``neighbours``, how many
    neighbour databases besides the task's own (0: the task's database alone)."""

    name = "rule/sql"
    #: Deterministic on read-only databases, and the query's rows and parse are cached here already:
    #: recomputing on a fork's replay beats hashing every turn (its prompt holds the schema) to memoise.
    memoize = False

    def __init__(
        self,
        timeout_s: float = 5.0,
        max_rows: int = 1_000_000,
        max_bytes: int = 128 << 20,
        neighbours: int = NEIGHBOURS,
    ):
        if max_rows < 1 or max_bytes < 1:
            raise ConfigError(f"{self.name}: max_rows and max_bytes must be >= 1, got {max_rows}, {max_bytes}.")
        if not 0 <= neighbours <= MAX_NEIGHBOURS:
            raise ConfigError(f"{self.name}: neighbours must be in 0..{MAX_NEIGHBOURS}, got {neighbours}.")
        if not timeout_s > 0:
            raise ConfigError(f"{self.name}: timeout_s must be > 0, got {timeout_s}.")
        self.timeout_s = timeout_s
        self.limits = ResultLimits(max_rows, max_bytes)
        self.neighbours = neighbours

    def results(self, turn: Turn) -> tuple[Gold, Prediction]:
        """The gold's and the submitted query's results on the verdict's databases (shared by the judges)."""
        gold = DATABASES.gold(turn, self.timeout_s, self.limits, self.neighbours)
        return gold, DATABASES.predicted(turn, gold, self.timeout_s, self.limits)


class ExecutionMatchJudge(_SQLJudge):
    """1.0 when the submitted SQL returns the gold result on the task's database and on every
    neighbour database, else 0.0.

    Args:
        mode: ``"multiset"`` (default) or ``"set"`` (skyrl-gym / distinct-row semantics).
        timeout_s: the one deadline of the submitted query over all the verdict's databases.
        max_rows, max_bytes: the most rows and bytes of one result compared; a submitted result
            past either scores 0.0 with the reason, a gold result past them is a
            :class:`~prm_gym.envs.sql.suite.GoldTooLarge` error (the task is not judged).
        neighbours: neighbour databases compared on besides the task's (0 turns the test suite off).
    """

    name = "rule/execution_match"

    def __init__(
        self,
        mode: MatchMode = "multiset",
        timeout_s: float = 5.0,
        max_rows: int = 1_000_000,
        max_bytes: int = 128 << 20,
        neighbours: int = NEIGHBOURS,
    ):
        if mode not in ("multiset", "set"):
            raise ConfigError(f"rule/execution_match: mode must be 'multiset' or 'set', got {mode!r}.")
        super().__init__(timeout_s, max_rows, max_bytes, neighbours)
        self.mode: MatchMode = mode

    def score_one(self, turn: Turn) -> Verdict:
        gold, pred = self.results(turn)
        for i, want in enumerate(gold.results):  # stops at the first database where they differ
            got = pred.on(i)
            if got is None:
                return Verdict(0.0, detail=pred.why)
            if not results_match(want, got, ordered=gold.ordered, mode=self.mode):
                if i == 0:
                    return Verdict(0.0, detail="different result")
                return Verdict(
                    0.0,
                    detail=f"matches on the task's database but not on neighbour database {i} (same schema, "
                    "other rows): the query does not compute the answer",
                )
        return Verdict(1.0, detail="match")


class SyntaxJudge(_SQLJudge):
    """0.5 when sqlglot parses one read-only query, plus 0.5 when it executes."""

    name = "rule/sql_syntax"
    term = "syntax"

    def score_one(self, turn: Turn) -> Verdict:
        sql = turn.answer or ""
        parses = is_read_only_query(sql, dialect_of(turn))
        runs = parses and self.results(turn)[1].main is not None
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
    submitted columns lined up with the gold's first (:func:`~prm_gym.envs.sql.results.aligned_columns`);
    the lowest F1 over the task's database and its neighbours (rows copied from a tool's output
    match only where they were seen)."""

    name = "rule/sql_result_overlap"
    term = "overlap"

    def score_one(self, turn: Turn) -> Verdict:
        gold, pred = self.results(turn)
        worst = 1.0
        for i, want in enumerate(gold.results):  # the lowest F1: stops at a first 0
            got = pred.on(i)
            if got is None:
                return Verdict(0.0, detail=pred.why)
            f1 = _row_f1(want, got)
            if f1 < 1.0 and (aligned := aligned_columns(want, got)) is not got.rows:
                f1 = max(f1, _row_f1(want, aligned))  # its rows' multiset alone: no size to measure
            worst = min(worst, f1)
            if worst == 0.0:
                break
        return Verdict(worst)


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
