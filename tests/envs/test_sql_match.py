"""Execution match and the partial-credit SQL judges, on real SQLite files."""

from __future__ import annotations

import sqlite3
import tracemalloc
from pathlib import Path

import pytest

from prm_gym.core.errors import JudgeError
from prm_gym.core.parsing import format_answer, format_tool_call, parse_action
from prm_gym.core.tasks import Task
from prm_gym.core.tools import ToolResult
from prm_gym.envs.sql.judges import (
    DATABASES,
    SQLShape,
    gold_orders,
    is_read_only_query,
    row_f1,
    rows_match,
    sql_shape,
)
from prm_gym.envs.sql.results import ByteLRU, ResultLimits, repair_spacing
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL);
        INSERT INTO customers VALUES (1, 'Ana', 'Oslo'), (2, 'Ben', 'Lima'), (3, 'Eli', 'Oslo');
        INSERT INTO orders VALUES (1, 1, 10.0), (2, 1, 5.5), (3, 2, 7.0), (4, 3, 10.0);
        """
    )
    conn.commit()
    conn.close()
    return path


def _turn(db_path: Path, gold: str, answer: str) -> Turn:
    task = Task("t1", "q", gold, {"db_path": str(db_path), "db_id": "shop"})
    return Turn(task, 0, format_answer(answer), parse_action(format_answer(answer)), final=True)


def _score(judge_id: str, db_path: Path, gold: str, answer: str, **kw: object) -> float:
    return score_batch(make_judge(judge_id, **kw), [_turn(db_path, gold, answer)])[0].score


CASES = [
    # (gold, predicted, multiset verdict, set verdict)
    ("SELECT name FROM customers WHERE city = 'Oslo'", "SELECT name FROM customers WHERE city='Oslo'", 1, 1),
    (
        "SELECT name FROM customers WHERE city = 'Oslo'",
        "SELECT name FROM customers WHERE city <> 'Lima' ORDER BY id DESC",
        1,
        1,
    ),
    ("SELECT name FROM customers ORDER BY name", "SELECT name FROM customers ORDER BY name DESC", 0, 1),
    ("SELECT total FROM orders", "SELECT DISTINCT total FROM orders", 0, 1),
    ("SELECT COUNT(*) FROM orders", "SELECT COUNT(id) FROM orders", 1, 1),
    ("SELECT COUNT(*) FROM orders", "SELECT 4.0", 1, 1),  # on this database alone (neighbours=0); see below
    ("SELECT name, city FROM customers", "SELECT city, name FROM customers", 1, 1),  # Spider: any column order
    ("SELECT name FROM customers", "SELECT nme FROM customers", 0, 0),
    ("SELECT name FROM customers", "DELETE FROM customers", 0, 0),
    ("SELECT name FROM customers", "SELECT name FROM customers; DROP TABLE orders", 0, 0),
]


@pytest.mark.parametrize(("gold", "pred", "multi", "as_set"), CASES)
def test_execution_match_verdicts(db_path: Path, gold: str, pred: str, multi: int, as_set: int) -> None:
    """How two results compare, on the task's database alone (``neighbours=0``)."""
    assert _score("rule/execution_match", db_path, gold, pred, neighbours=0) == multi
    assert _score("rule/execution_match", db_path, gold, pred, mode="set", neighbours=0) == as_set


def test_database_is_unchanged_after_judging_a_write(db_path: Path) -> None:
    before = db_path.read_bytes()
    _score("rule/execution_match", db_path, "SELECT 1", "DROP TABLE customers")
    assert db_path.read_bytes() == before


def test_broken_gold_or_missing_database_is_a_judge_error(db_path: Path, tmp_path: Path) -> None:
    with pytest.raises(JudgeError, match="gold query failed"):
        _score("rule/execution_match", db_path, "SELECT nope FROM customers", "SELECT 1")
    with pytest.raises(JudgeError, match="does not exist"):
        _score("rule/execution_match", tmp_path / "gone.sqlite", "SELECT 1", "SELECT 1")


def test_runaway_prediction_scores_zero_quickly(db_path: Path) -> None:
    pred = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r) SELECT COUNT(*) FROM r"
    judge = make_judge("rule/execution_match", timeout_s=0.2)
    verdict = score_batch(judge, [_turn(db_path, "SELECT 1", pred)])[0]
    assert verdict.score == 0.0 and "time limit" in verdict.detail


def test_partial_credit_terms(db_path: Path) -> None:
    gold = "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.total > 8"
    assert _score("rule/sql_syntax", db_path, gold, gold) == 1.0
    assert _score("rule/sql_syntax", db_path, gold, "SELECT nme FROM customers") == 0.5
    assert _score("rule/sql_syntax", db_path, gold, "SELEC FROM WHERE") == 0.0
    assert _score("rule/sql_syntax", db_path, gold, "DELETE FROM orders") == 0.0
    assert _score("rule/sql_schema_link", db_path, gold, gold) == 1.0
    half = _score("rule/sql_schema_link", db_path, gold, "SELECT name FROM customers")
    assert 0.0 < half < 1.0
    assert _score("rule/sql_result_overlap", db_path, gold, gold) == 1.0
    half_rows = _score("rule/sql_result_overlap", db_path, gold, "SELECT name FROM customers", neighbours=0)
    assert half_rows == pytest.approx(0.8)
    assert _score("rule/sql_result_overlap", db_path, gold, "SELECT 'x'") == 0.0


def test_explore_rewards_fresh_successful_calls(db_path: Path) -> None:
    call = format_tool_call("list_tables", {})
    task = Task("t1", "q", "SELECT 1", {"db_path": str(db_path)})
    judge = make_judge("rule/sql_explore")
    first = Turn(task, 0, call, parse_action(call), (ToolResult("list_tables", True, "x"),))
    again = Turn(task, 1, call, parse_action(call), (ToolResult("list_tables", True, "x"),), ((call, "x"),))
    failed = Turn(task, 0, call, parse_action(call), (ToolResult("list_tables", False, "err"),))
    assert [v.score for v in score_batch(judge, [first, again, failed])] == [1.0, 0.0, 0.0]


def test_helpers() -> None:
    assert gold_orders("SELECT a FROM t ORDER BY a") and not gold_orders("SELECT a FROM (SELECT a FROM t ORDER BY a)")
    assert rows_match([(1,), (1,), (2,)], [(2,), (1,), (1,)]) and not rows_match([(1,), (1,)], [(1,)])
    assert rows_match([(1,), (2,)], [(2,), (1,)], ordered=False) and not rows_match(
        [(1,), (2,)], [(2,), (1,)], ordered=True
    )
    assert row_f1([], []) == 1.0 and row_f1([(1,)], []) == 0.0
    assert sql_shape("SELECT a FROM t").items == {"table:t", "column:a"} and sql_shape("SELEC ((").items is None


def test_one_parse_gives_what_the_separate_sqlglot_calls_gave() -> None:
    multi = sql_shape("SELECT a FROM t; DELETE FROM u")
    assert not multi.read_only and multi.items == {"table:t", "table:u", "column:a"}  # parse_one's Block
    cte = sql_shape("WITH c AS (SELECT x FROM t) SELECT x FROM c ORDER BY x")
    assert cte.read_only and cte.items == {"table:t", "column:x"} and cte.orders
    assert sql_shape("") == sql_shape("SELEC ((") == SQLShape(False, None, False)
    assert is_read_only_query("SELECT 1") and not is_read_only_query("DELETE FROM t")


def test_the_judges_of_one_turn_run_the_submitted_query_once(db_path: Path) -> None:
    gold = "SELECT name FROM customers WHERE city = 'Oslo'"
    answer = "SELECT name FROM customers WHERE city = 'Oslo' AND id > 0"
    turn = _turn(db_path, gold, answer)
    ran: list[str] = []
    DATABASES.get(turn).conn.set_trace_callback(ran.append)  # type: ignore[attr-defined]
    try:
        judges = ["rule/execution_match", "rule/sql_syntax", "rule/sql_result_overlap"]
        scores = [score_batch(make_judge(j), [turn])[0].score for j in judges]
    finally:
        DATABASES.get(turn).conn.set_trace_callback(None)  # type: ignore[attr-defined]
    assert scores == [1.0, 1.0, 1.0]
    assert ran.count(answer) == 1


SPIDER_CASES = [
    # (gold, predicted, verdict): Spider's test-suite execution match
    ("SELECT name, city FROM customers", "SELECT city, name FROM customers", 1),
    ("SELECT id, name, city FROM customers", "SELECT city, id, name FROM customers", 1),
    # each column holds the gold's values, but the rows pair them differently
    (
        "SELECT name, city FROM customers",
        "SELECT a.name, b.city FROM customers a JOIN customers b ON b.id = a.id % 3 + 1",
        0,
    ),
    ("SELECT name, city FROM customers", "SELECT name FROM customers", 0),
    # order matters only where the gold's outermost query orders
    ("SELECT name FROM customers ORDER BY id DESC", "SELECT name FROM customers ORDER BY id", 0),
    (
        "SELECT name FROM (SELECT name, id FROM customers ORDER BY id DESC LIMIT 2)",
        "SELECT name FROM customers WHERE id >= 2",
        1,
    ),
    (
        "SELECT name FROM customers WHERE id IN (SELECT id FROM customers ORDER BY id LIMIT 2)",
        "SELECT name FROM customers WHERE id < 3 ORDER BY name DESC",
        1,
    ),
    (
        "SELECT name FROM customers UNION SELECT city FROM customers ORDER BY 1",
        "SELECT city FROM customers UNION SELECT name FROM customers ORDER BY 1 DESC",
        0,
    ),
    ("SELECT name, id FROM customers ORDER BY id", "SELECT id, name FROM customers ORDER BY id", 1),
    ("SELECT name, id FROM customers ORDER BY id", "SELECT id, name FROM customers ORDER BY id DESC", 0),
    # spacing typos Spider's evaluation repairs, in the prediction and in the gold
    ("SELECT name FROM customers WHERE id >= 2", "SELECT name FROM customers WHERE id > = 2", 1),
    ("SELECT name FROM customers WHERE id < = 2", "SELECT name FROM customers WHERE id <= 2", 1),
    ("SELECT name FROM customers WHERE id != 2", "SELECT name FROM customers WHERE id ! = 2", 1),
    ("SELECT name FROM customers WHERE name = 'x'", "SELECT name FROM customers WHERE name = '> ='", 1),  # both empty
]


@pytest.mark.parametrize(("gold", "pred", "verdict"), SPIDER_CASES)
def test_spider_test_suite_semantics(db_path: Path, gold: str, pred: str, verdict: int) -> None:
    assert _score("rule/execution_match", db_path, gold, pred, neighbours=0) == verdict


def test_a_repaired_typo_also_counts_as_valid_syntax(db_path: Path) -> None:
    gold, pred = "SELECT name FROM customers WHERE id >= 2", "SELECT name FROM customers WHERE id > = 2"
    assert _score("rule/sql_syntax", db_path, gold, pred) == 1.0
    assert is_read_only_query(pred) and repair_spacing("SELECT '> =' WHERE a > = 1") == "SELECT '> =' WHERE a >= 1"


def test_byte_lru_holds_at_most_its_bytes() -> None:
    cache: ByteLRU[str, str] = ByteLRU(100)
    for i in range(10):
        cache.put(str(i), "x", 30)
    assert cache.bytes <= 100 and len(cache) == 3 and cache.get("9") == "x" and cache.get("0") is None
    cache.put("big", "y", 101)
    assert cache.get("big") is None


HOSTILE_RESULTS = [
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300) SELECT randomblob(4000000) FROM c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, 'row ' || x FROM c",
]


@pytest.mark.parametrize("answer", HOSTILE_RESULTS, ids=["blobs", "runaway-cte"])
def test_the_judge_holds_a_bounded_amount_of_a_huge_result(db_path: Path, answer: str) -> None:
    """300 blobs of 4 MB (1.2 GB) or an endless recursive query: scored wrong, memory stays bounded."""
    limits = ResultLimits()
    judge = make_judge("rule/execution_match", timeout_s=3.0)
    tracemalloc.start()
    try:
        verdict = score_batch(judge, [_turn(db_path, "SELECT name FROM customers", answer)])[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the endless query is stopped by whichever bound it meets first: the rows or (on a loaded machine) the clock
    # (a value longer than the judge's value bound, ResultLimits.value_bytes, is refused as it is read)
    assert verdict.score == 0.0 and any(w in verdict.detail for w in ("too large", "time limit", "too big")), verdict
    # the bound, plus the row that crossed it (one value is at most 10 MB, SQLite's length cap here)
    assert peak < limits.bytes + (24 << 20), f"peak {peak / 2**20:.0f} MiB"
    assert DATABASES._recent.bytes <= DATABASES._recent.max_bytes and DATABASES._gold.bytes <= DATABASES._gold.max_bytes


def test_result_bounds_are_knobs(db_path: Path) -> None:
    gold, pred = "SELECT name FROM customers", "SELECT name FROM customers ORDER BY id DESC"
    assert _score("rule/execution_match", db_path, gold, pred, max_rows=3) == 1.0
    small = make_judge("rule/execution_match", max_rows=2)
    verdict = score_batch(small, [_turn(db_path, "SELECT name FROM customers WHERE id = 1", pred)])[0]
    assert verdict.score == 0.0 and "more than 2 rows" in verdict.detail
    with pytest.raises(JudgeError, match="max_rows"):  # a gold result past the bound names the knob
        score_batch(make_judge("rule/execution_match", max_rows=2), [_turn(db_path, gold, pred)])


def test_partial_credit_lines_the_columns_up_like_execution_match(db_path: Path) -> None:
    gold = "SELECT name, city FROM customers"
    assert _score("rule/sql_result_overlap", db_path, gold, "SELECT city, name FROM customers") == 1.0
    two_of_three = "SELECT city, name FROM customers WHERE id < 3"
    assert _score("rule/sql_result_overlap", db_path, gold, two_of_three, neighbours=0) == pytest.approx(0.8)
