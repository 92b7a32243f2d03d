"""SQL judges on large results (issue 34 item 6): per-check time at 10k and 95k result rows.

One generated SQLite database per size holds a table of ``rows + 1000`` rows (text, real and
integer columns); the gold query returns ``rows`` of them. Each timed round judges two answers, the
right one and one that is off by one row (same length), each in a text no earlier round used
(``fresh_text.fresh_sql``), on

* ours: ``rule/execution_match`` as shipped (multiset, columns in any order, the task's database
  and its 3 neighbour databases, the gold's results and statistics cached per process, as in
  training), and separately the four SQL judges of prm/SQL-v0's default judge on the same turn;
* the baseline, measured in the same run: skyrl-gym's approach in plain ``sqlite3``: a fresh
  connection per check, both queries run and fetched whole (``fetchall``), rows compared as sets.

Rounds alternate which side runs first; medians of the per-check times.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from fresh_text import fresh_sql
from result_line import emit, median, settle, spread

from prm_gym.core.parsing import format_answer, parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

SQL_JUDGES = ["rule/execution_match", "rule/sql_syntax", "rule/sql_schema_link", "rule/sql_result_overlap"]
CONDITIONS = (
    "same database file, same two answers per round (right, off by one row) in a text no earlier round used "
    "on both sides, rounds alternated, medians; ours: judge objects reused, the gold's result cached per "
    "process (as in training), 3 neighbour databases (built before timing), multiset compare with columns "
    "in any order; baseline: plain sqlite3, fresh connection per check, gold and answer run and fetchall'd, "
    "set compare (skyrl-gym's calculate_reward_single approach; its venv not installed here)"
)


def build(path: Path, rows: int) -> Task:
    """A database with ``rows + 1000`` events, and the task whose gold returns ``rows`` of them."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT, amount REAL, qty INTEGER)")
    conn.execute(
        "INSERT INTO events WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < ?) "
        "SELECT n, 'kind-' || (n * 7919 % 997), round((n * 31 % 1000) / 7.0, 2), n % 37 FROM r",
        (rows + 1000,),
    )
    conn.commit()
    conn.close()
    gold = f"SELECT kind, amount, qty FROM events WHERE id <= {rows}"
    return Task(f"large-{rows}", "q", gold, {"db_path": str(path), "db_id": path.stem})


def answers(rows: int) -> list[str]:
    return [
        f"SELECT kind, amount, qty FROM events WHERE id <= {rows}",
        f"SELECT kind, amount, qty FROM events WHERE id > 1 AND id <= {rows + 1}",
    ]


def baseline_check(db_path: str, gold: str, pred: str) -> bool:
    conn = sqlite3.connect(db_path)
    try:
        g = frozenset(conn.execute(gold).fetchall())
        try:
            p = frozenset(conn.execute(pred).fetchall())
        except sqlite3.Error:
            return False
        return g == p
    finally:
        conn.close()


def _turn(task: Task, sql: str) -> Turn:
    return Turn(task, 0, format_answer(sql), parse_action(format_answer(sql)), final=True)


def measure(task: Task, rows: int, reps: int) -> dict[str, list[float]]:
    """Seconds per check of each side, one entry per round (round 0 warms up: neighbours, gold cache)."""
    match = make_judge("rule/execution_match")
    judges = [make_judge(j) for j in SQL_JUDGES]
    times: dict[str, list[float]] = {"match": [], "sql judges": [], "baseline": []}
    for rnd in range(reps + 1):
        preds = [fresh_sql(p, f"r{rnd}_{i}") for i, p in enumerate(answers(rows))]
        sides = ["match", "sql judges", "baseline"]
        for side in sides[rnd % 3 :] + sides[: rnd % 3]:  # who goes first rotates
            fresh = [fresh_sql(p, side.replace(" ", "_")) for p in preds]  # no side reads another's cache
            settle()
            t0 = time.perf_counter()
            if side == "match":
                scores = [match.score([_turn(task, p)])[0].score for p in fresh]
            elif side == "sql judges":
                scores = [[j.score([_turn(task, p)])[0].score for j in judges][0] for p in fresh]  # noqa: RUF015 (all run)
            else:
                scores = [float(baseline_check(str(task.meta["db_path"]), str(task.answer), p)) for p in fresh]
            took = (time.perf_counter() - t0) / len(fresh)
            assert scores == [1.0, 0.0], (side, scores)
            if rnd:
                times[side].append(took)
    return times


def run(sizes: list[int], reps: int, tmp: Path) -> None:
    print(f"SQL judges on large results: {CONDITIONS}")
    for rows in sizes:
        task = build(tmp / f"large-{rows}.sqlite", rows)
        times = measure(task, rows, reps)
        base_t = times["baseline"]
        base = median(base_t) * 1e3
        for side, label in (("match", "rule/execution_match"), ("sql judges", "the 4 SQL judges of the default")):
            ours = median(times[side]) * 1e3
            print(
                f"{rows:>7,} result rows  {label:<34} {ours:8.1f} ms/check  baseline {base:8.1f} ms/check"
                f"  {base / ours:5.2f}x   ({reps} rounds)"
            )
            emit(
                "sql",
                f"{label} on a {rows:,}-row result",
                ours,
                base,
                "plain sqlite3 fetchall + set compare per check (skyrl-gym's approach)",
                "ms/check",
                "lower",
                f"ours {spread([t * 1e3 for t in times[side]])}, baseline {spread([t * 1e3 for t in base_t])}",
                note=CONDITIONS,
            )
