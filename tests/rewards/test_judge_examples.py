"""The worked examples of docs/judges.md for the rule judges, the discriminative PRM's aggregate
and the combination options, with the numbers the page gives (tests/docs/test_judges_doc.py
checks that every judge's section names a worked example that exists)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.core.tools import ToolResult
from prm_gym.rewards.combine import CombineConfig, combine_group
from prm_gym.rewards.prm import _AGGREGATES
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

CALC = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
SEARCH = '<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call>'


def _turn(task: Task, action: str, results: Sequence[ToolResult] = (), history: Sequence[Any] = ()) -> Turn:
    parsed = parse_action(action)
    return Turn(task, len(history), action, parsed, tuple(results), tuple(history), parsed.answer is not None)


def _score(judge_id: str, turn: Turn, **kw: Any) -> float:
    return score_batch(make_judge(judge_id, **kw), [turn])[0].score


def test_math_equiv_example() -> None:
    assert _score("rule/math_equiv", _turn(Task("m", "q", "3.5"), "<answer>7/2</answer>")) == 1.0
    assert _score("rule/math_equiv", _turn(Task("m", "q", "\\frac{15}{7}"), "<answer>15/7</answer>")) == 1.0
    assert _score("rule/math_equiv", _turn(Task("m", "q", "18"), "<answer>1 8</answer>")) == 0.0


def test_f1_and_exact_match_example() -> None:
    """Gold 'Eiffel Tower in Paris', answer 'the Eiffel Tower': tokens {eiffel, tower} against
    {eiffel, tower, in, paris}, precision 1, recall 1/2, F1 2/3; exact match 0."""
    task = Task("q", "q", "Eiffel Tower in Paris")
    assert _score("rule/f1", _turn(task, "<answer>the Eiffel Tower</answer>")) == pytest.approx(2 / 3)
    assert _score("rule/exact_match", _turn(task, "<answer>the Eiffel Tower</answer>")) == 0.0
    assert _score("rule/exact_match", _turn(task, "<answer>eiffel tower in Paris.</answer>")) == 1.0


def test_format_and_tool_example() -> None:
    task = Task("q", "q", "42")
    assert _score("rule/format", _turn(task, CALC)) == 0.0
    assert _score("rule/format", _turn(task, "<answer>42")) == -1.0  # unclosed tag
    results = (
        ToolResult("calculator", True, "42"),
        ToolResult("calculator", False, "Error: bad expression"),  # the agent's fault: counts
        ToolResult("calculator", False, "down", infra_error=True),  # infrastructure: not counted
    )
    assert _score("rule/tool", _turn(task, CALC * 3, results)) == -0.5


def test_retrieval_example() -> None:
    """Gold passages p1, p2: a turn that first retrieves p1 earns 1/2, one that then retrieves
    p1 and p2 earns 1/2 (p1 was seen), a repeat earns 0."""
    task = Task("r", "q", "x", {"gold_ids": ["p1", "p2"]})
    one = "Doc 1 [id=p1] Title: A\ntext"
    both = one + "\nDoc 2 [id=p2] Title: B\ntext"
    turns = [
        _turn(task, SEARCH, [ToolResult("search", True, one)]),
        _turn(task, SEARCH, [ToolResult("search", True, both)], [(SEARCH, one)]),
        _turn(task, SEARCH, [ToolResult("search", True, both)], [(SEARCH, one), (SEARCH, both)]),
    ]
    assert [v.score for v in score_batch(make_judge("rule/retrieval"), turns)] == [0.5, 0.5, 0.0]


def test_unit_tests_example() -> None:
    """Four cases, the program passes three: rule/unit_tests 3/4, rule/unit_tests_all 0 (bwrap)."""
    cases = ["assert candidate(1, 2) == 3", "assert candidate(2, 2) == 4"]
    cases += ["assert candidate(-1, 1) == 0", "assert candidate(0, 5) == 0"]  # the last one is wrong
    meta = {"entry_point": "add", "setup": "", "arg": "candidate", "cases": cases, "prompt_code": ""}
    turn = _turn(Task("c", "q", None, meta), "<answer>def add(a, b):\n    return a + b\n</answer>")
    some, every = make_judge("rule/unit_tests"), make_judge("rule/unit_tests_all")
    try:
        assert score_batch(some, [turn])[0].score == 0.75
        assert score_batch(every, [turn])[0].score == 0.0
    finally:
        for judge in (some, every):
            judge.close()  # type: ignore[union-attr]


@pytest.fixture
def shop_db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
            CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL);
            INSERT INTO customers VALUES (1, 'Ana', 'Oslo'), (2, 'Ben', 'Lima'), (3, 'Eli', 'Oslo');
            INSERT INTO orders VALUES (1, 1, 10.0), (2, 1, 5.5), (3, 2, 7.0), (4, 3, 10.0);
            """
        )
    return path


def test_sql_example(shop_db: Path) -> None:
    """Gold: customers with an order over 8 (Ana, Eli). Answer: every customer (Ana, Ben, Eli)."""
    gold = "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.total > 8"
    task = Task("s", "q", gold, {"db_path": str(shop_db)})
    every = _turn(task, "<answer>SELECT name FROM customers</answer>")
    assert _score("rule/execution_match", every) == 0.0
    assert _score("rule/sql_result_overlap", every, neighbours=0) == pytest.approx(0.8)  # P 2/3, R 1
    assert _score("rule/sql_result_overlap", every) <= 0.8  # the lowest F1 over this database and its neighbours
    # {customers, name} against {customers, orders, name, id, customer_id, total}: 2/6
    assert _score("rule/sql_schema_link", every) == pytest.approx(1 / 3)
    assert _score("rule/sql_syntax", every) == 1.0
    assert _score("rule/sql_syntax", _turn(task, "<answer>SELECT nme FROM customers</answer>")) == 0.5
    assert _score("rule/execution_match", _turn(task, f"<answer>{gold}</answer>")) == 1.0


def test_discriminative_aggregate_example() -> None:
    """Step probabilities 0.9, 0.4, 0.7 of the positive label: the turn scores min = 0.4 (default)."""
    steps = [0.9, 0.4, 0.7]
    assert _AGGREGATES["min"](steps) == 0.4
    assert _AGGREGATES["mean"](steps) == pytest.approx(2 / 3)
    assert _AGGREGATES["last"](steps) == 0.7 and _AGGREGATES["max"](steps) == 0.9


def test_credit_and_gate_example() -> None:
    """Process [[0.5, 0.2], [0.4, 0.6]], outcomes [1, 0]."""
    process, outcomes = [[0.5, 0.2], [0.4, 0.6]], [1.0, 0.0]
    assert combine_group(process, outcomes) == [[0.5, 1.2], [0.4, 0.6]]
    # G-RA: the failed trajectory (outcome 0 < gate 0.5) keeps no process reward
    assert combine_group(process, outcomes, CombineConfig(gate=0.5)) == [[0.5, 1.2], [0.0, 0.0]]
    # PURE: values min(0.5, 0.2) = 0.2 and 0.2, so rewards 0.2 - 0.2 = 0 and 0.2 (+ outcome 1)
    pure = combine_group(process, outcomes, CombineConfig(credit="min"))
    assert pure[0] == pytest.approx([0.0, 1.2]) and pure[1] == pytest.approx([-0.2, 0.6])
