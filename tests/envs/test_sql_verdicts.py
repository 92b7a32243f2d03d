"""The SQL judges' verdicts on a fixed corpus, pinned, and how often they parse a query.

``sql_verdicts.json`` holds, for each (gold, predicted) pair, the score of every SQL judge that reads
the query's text and what one parse of each query told them. It was written by the code before
the judges shared one parse per query (`python tests/envs/test_sql_verdicts.py`); the test checks
that today's code gives the same verdicts, so a faster judge never means a different reward.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import uuid
from pathlib import Path
from typing import Any

from prm_gym.core.parsing import format_answer, parse_action
from prm_gym.core.tasks import Task
from prm_gym.envs.sql.judges import gold_shape, sql_shape
from prm_gym.envs.sql.shape import SUBMITTED
from prm_gym.envs.sql.tasks import generate_sql_tasks
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

GOLDEN = Path(__file__).with_name("sql_verdicts.json")
JUDGES = ["rule/execution_match", "rule/sql_syntax", "rule/sql_schema_link", "rule/sql_result_overlap"]
SHOP_SQL = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL);
INSERT INTO customers VALUES (1, 'Ana', 'Oslo'), (2, 'Ben', 'Lima'), (3, 'Eli', 'Oslo');
INSERT INTO orders VALUES (1, 1, 10.0), (2, 1, 5.5), (3, 2, 7.0), (4, 3, 10.0);
"""
SHOP_GOLDS = [
    "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.total > 8",
    "SELECT name, city FROM customers ORDER BY name",
    "SELECT city, COUNT(*) FROM customers GROUP BY city",
    "WITH big AS (SELECT customer_id FROM orders WHERE total >= 7) "
    "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM big)",
]
SHOP_PREDS = [
    "SELECT name FROM customers",
    "  SELECT name FROM customers \n",
    "SELECT name FROM customers;",
    "SELECT name FROM customers ORDER BY name;;",
    "select NAME from CUSTOMERS",
    'SELECT "name" FROM "customers"',
    "SELECT name FROM customers; DROP TABLE orders",
    "DELETE FROM orders",
    "INSERT INTO orders VALUES (9, 1, 1.0)",
    "PRAGMA table_info(customers)",
    "ATTACH 'x.sqlite' AS y",
    "SELEC FROM WHERE",
    "",
    "   ",
    "SELECT nme FROM customers",
    "SELECT name FROM customers WHERE id > = 2",
    "SELECT name FROM customers -- the names",
    "/* names */ SELECT name FROM customers",
    "SELECT * FROM customers",
    "SELECT customers.* FROM customers",
    "SELECT name FROM customers UNION SELECT city FROM customers",
    "SELECT name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT n FROM r",
    "SELECT city, name FROM customers",
    "SELECT name, city FROM customers ORDER BY name DESC",
    "SELECT city, COUNT(id) FROM customers GROUP BY 1",
    "SELECT 4.0",
    "SELECT 'x'",
    "VALUES (1)",
    "EXPLAIN SELECT 1",
    "SELECT COUNT(*) FROM orders",
    "SELECT name FROM customers LIMIT 0",
    "SELECT * FROM (SELECT name FROM customers) LIMIT 0",
    "SELECT name FROM customers WHERE name = '> ='",
    "SELECT CASE WHEN total > 8 THEN 'big' ELSE 'small' END AS size FROM orders",
    "WITH fresh_1 AS (SELECT 1) SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.total > 8",
    "SELECT name FROM customers WHERE city = 'Oslo' AND id IN (SELECT customer_id FROM orders)",
    "SELECT DISTINCT c.name FROM customers AS c, orders AS o WHERE c.id = o.customer_id ORDER BY 1",
    "SELECT name FROM customers WHERE (",
    "SELECT name FROM customers WHERE name LIKE 'A%' OR name GLOB 'E*'",
]


def _shop_cases(db: Path) -> list[tuple[Task, str]]:
    """Every shop prediction against one gold (in turn), and every gold against itself."""
    cases = [(SHOP_GOLDS[i % len(SHOP_GOLDS)], pred) for i, pred in enumerate(SHOP_PREDS)]
    cases += [(gold, gold) for gold in SHOP_GOLDS]
    meta = {"db_path": str(db), "db_id": "shop"}
    return [(Task(f"shop{i}", "q", gold, meta), pred) for i, (gold, pred) in enumerate(cases)]


def _generated_cases(cache_dir: Path) -> list[tuple[Task, str]]:
    """30 generated tasks, each with its gold, the gold behind an unused CTE, and an empty result."""
    cases = []
    for task in generate_sql_tasks(30, seed=11, split="test", cache_dir=cache_dir):
        gold = str(task.answer)
        for pred in (gold, f"WITH fresh_x AS (SELECT 1) {gold}", f"SELECT * FROM ({gold}) LIMIT 0"):
            cases.append((task, pred))
    return cases


def corpus(tmp: Path) -> list[tuple[Task, str]]:
    """The (task, predicted query) pairs of the golden file, with their databases made under ``tmp``."""
    conn = sqlite3.connect(tmp / "shop.sqlite")
    conn.executescript(SHOP_SQL)
    conn.commit()
    conn.close()
    return _shop_cases(tmp / "shop.sqlite") + _generated_cases(tmp / "dbs")


def _shape(shape: Any) -> list[Any]:
    return [shape.read_only, None if shape.items is None else sorted(shape.items), shape.orders]


def verdicts(cases: list[tuple[Task, str]], neighbours: int = 0) -> list[dict[str, Any]]:
    """Each case's judge scores and parse results, in the golden file's form (the golden file was
    written before the test suite: on each task's database alone, ``neighbours=0``)."""
    judges = [make_judge(j, neighbours=neighbours) for j in JUDGES]
    rows = []
    for task, pred in cases:
        turn = Turn(task, 0, format_answer(pred), parse_action(format_answer(pred)), final=True)
        row: dict[str, Any] = {"task": task.id, "gold": task.answer, "pred": pred}
        for name, judge in zip(JUDGES, judges, strict=True):
            row[name] = score_batch(judge, [turn])[0].score
        row["shape"] = _shape(sql_shape(turn.answer or ""))
        row["gold_shape"] = _shape(gold_shape(str(task.answer)))
        rows.append(row)
    return rows


def test_the_sql_judges_verdicts_are_those_of_the_old_code(tmp_path: Path) -> None:
    expected = json.loads(GOLDEN.read_text())
    got = verdicts(corpus(tmp_path))
    assert len(got) == len(expected) == 134
    for old, new in zip(expected, got, strict=True):
        assert new == old, f"{old['pred']!r} against {old['gold']!r}"


def test_the_test_suite_only_takes_away_credit_from_queries_that_do_not_compute_the_answer(tmp_path: Path) -> None:
    """With neighbour databases (the default), no score goes up; execution match changes for one
    pair only, a query right on the shop database by accident (customers of Oslo who ordered are not
    the customers with an order over 8), and result overlap only goes down."""
    expected = json.loads(GOLDEN.read_text())
    got = verdicts(corpus(tmp_path), neighbours=3)
    changed = []
    for old, new in zip(expected, got, strict=True):
        assert all(new[j] <= old[j] for j in JUDGES), (old, new)
        assert new["rule/sql_syntax"] == old["rule/sql_syntax"] and new["shape"] == old["shape"]
        if new["rule/execution_match"] != old["rule/execution_match"]:
            changed.append((old["gold"], old["pred"]))
        if old["pred"] == old["gold"]:
            assert new["rule/execution_match"] == new["rule/sql_result_overlap"] == 1.0
    accident = "SELECT name FROM customers WHERE city = 'Oslo' AND id IN (SELECT customer_id FROM orders)"
    assert changed == [(SHOP_GOLDS[0], accident)]


def test_each_query_is_parsed_once_whichever_judges_score_it_and_in_whatever_batches(tmp_path: Path) -> None:
    """The judges of a step share one parse; so do the judges of a batch scored judge by judge
    (TRL's reward functions), past the old 32-query cache, and texts that differ only in spacing."""
    tag = uuid.uuid4().hex  # texts no earlier test has had parsed
    cases = corpus(tmp_path)[len(SHOP_PREDS) + len(SHOP_GOLDS) :]  # the generated ones
    answers = [format_answer(f"{pred} -- {tag} {i}") for i, (_, pred) in enumerate(cases)]
    turns = [Turn(task, 0, a, parse_action(a), final=True) for (task, _), a in zip(cases, answers, strict=True)]
    step = [make_judge(j) for j in (*JUDGES, "rule/sql_explore")]
    before = SUBMITTED.parses
    for turn in turns[:5]:  # one env step at a time: every judge, then the next turn
        for judge in step:
            score_batch(judge, [turn])
    assert SUBMITTED.parses - before == 5
    before = SUBMITTED.parses
    for judge in step:  # a batch of 85, one judge after the other
        score_batch(judge, turns[5:])
    assert SUBMITTED.parses - before == 85
    before = SUBMITTED.parses
    spaced = [f"  {t.answer}\n" for t in turns]  # one more GRPO sample, with a space and a newline
    assert [sql_shape(sql) for sql in spaced] == [sql_shape(t.answer or "") for t in turns]
    assert SUBMITTED.parses == before


if __name__ == "__main__":  # rewrite the golden file (only when a verdict is meant to change)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rows = verdicts(corpus(Path(tmp)))
    GOLDEN.write_text("[\n" + ",\n".join(json.dumps(row) for row in rows) + "\n]\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
