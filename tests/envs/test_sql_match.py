"""Execution match and the partial-credit SQL judges, on real SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from prm_gym.core.errors import JudgeError
from prm_gym.core.parsing import format_answer, format_tool_call, parse_action
from prm_gym.core.tasks import Task
from prm_gym.core.tools import ToolResult
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.sql_match import (
    DATABASES,
    SQLShape,
    gold_orders,
    is_read_only_query,
    row_f1,
    rows_match,
    sql_shape,
)
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
    ("SELECT COUNT(*) FROM orders", "SELECT 4.0", 1, 1),
    ("SELECT name, city FROM customers", "SELECT city, name FROM customers", 0, 0),
    ("SELECT name FROM customers", "SELECT nme FROM customers", 0, 0),
    ("SELECT name FROM customers", "DELETE FROM customers", 0, 0),
    ("SELECT name FROM customers", "SELECT name FROM customers; DROP TABLE orders", 0, 0),
]


@pytest.mark.parametrize(("gold", "pred", "multi", "as_set"), CASES)
def test_execution_match_verdicts(db_path: Path, gold: str, pred: str, multi: int, as_set: int) -> None:
    assert _score("rule/execution_match", db_path, gold, pred) == multi
    assert _score("rule/execution_match", db_path, gold, pred, mode="set") == as_set


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
    assert _score("rule/sql_result_overlap", db_path, gold, "SELECT name FROM customers") == pytest.approx(0.8)
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
