"""SQL judges on large results (issue 34 item 6): per-check time at 10k and 95k result rows.

One generated SQLite database per size holds a table of ``rows + 1000`` rows (text, real and
integer columns); the gold query returns ``rows`` of them. Each timed round judges two answers, the
right one and one that is off by one row (same length), each in a text no earlier round used
(``fresh_text.fresh_sql``), on

* ours: ``rule/execution_match`` as shipped (multiset, columns in any order, the task's database
  and its 3 neighbour databases, the gold's results and statistics cached per process, as in
  training), and separately the four SQL judges of prm/SQL-v0's default judge on the same turn;
* ``rule/execution_match`` and the four judges with ``neighbours=0``: the task's database alone,
  as the baselines compare (like for like);
* the baseline, measured in the same run: skyrl-gym's approach in plain ``sqlite3``: a fresh
  connection per check, both queries run and fetched whole (``fetchall``), rows compared as sets;
* where skyrl-gym is installed (``make bench-peers``), skyrl-gym's own SQL reward function,
  ``calculate_reward_single``, in its own venv (``peer_worker.py``, kind ``sql_reward``) on a copy of
  the same database (it opens it read-write), the same two answers in its ``<solution>`` format.

Rounds alternate which side runs first; medians of the per-check times.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path

from fresh_text import fresh_sql
from peer_client import PeerSession
from result_line import emit, median, settle, skipped, spread

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
    "set compare (skyrl-gym's calculate_reward_single approach); skyrl-gym: its calculate_reward_single in its "
    "own venv on a copy of the database (timeout 5 s, like ours), timed inside its process like ours"
)
#: Why the default judges' rows cost more than the like-for-like ones (added to their notes).
SUITE_NOTE = (
    "ours as shipped also runs the answer on the 3 neighbour databases (test-suite execution match; the "
    "baselines compare on the task's database alone): the neighbours=0 rows are like for like"
)
SIDES = ["match", "sql judges", "match 0", "sql judges 0", "baseline", "skyrl"]
LABELS = {
    "match": "rule/execution_match",
    "sql judges": "the 4 SQL judges of the default",
    "match 0": "rule/execution_match(neighbours=0)",
    "sql judges 0": "the 4 SQL judges, neighbours=0",
}


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


def measure(task: Task, rows: int, reps: int, skyrl: PeerSession | None) -> dict[str, list[float]]:
    """Seconds per check of each side, one entry per round (round 0 warms up: neighbours, gold cache)."""
    match = make_judge("rule/execution_match")
    judges = {
        "match": [match],
        "sql judges": [make_judge(j) for j in SQL_JUDGES],
        "match 0": [make_judge("rule/execution_match", neighbours=0)],
        "sql judges 0": [make_judge(j, neighbours=0) for j in SQL_JUDGES],
    }
    sides = [s for s in SIDES if s != "skyrl" or skyrl is not None]
    times: dict[str, list[float]] = {side: [] for side in sides}
    for rnd in range(reps + 1):
        preds = [fresh_sql(p, f"r{rnd}_{i}") for i, p in enumerate(answers(rows))]
        for side in sides[rnd % len(sides) :] + sides[: rnd % len(sides)]:  # who goes first rotates
            fresh = [fresh_sql(p, side.replace(" ", "_")) for p in preds]  # no side reads another's cache
            if side == "skyrl":
                assert skyrl is not None
                reply = skyrl.ask("pass")  # the worker settles, times and gives its queries a fresh text
                if "error" in reply:
                    raise RuntimeError(f"skyrl-gym: {reply['error']}")
                if rnd:
                    times[side].append(float(reply["step_us"]) / 1e6)
                continue
            settle()
            t0 = time.perf_counter()
            if side == "baseline":
                scores = [float(baseline_check(str(task.meta["db_path"]), str(task.answer), p)) for p in fresh]
            else:  # every judge of the side scores the turn; the first's score is checked
                scores = [[j.score([_turn(task, p)])[0].score for j in judges[side]][0] for p in fresh]  # noqa: RUF015
            took = (time.perf_counter() - t0) / len(fresh)
            assert scores == [1.0, 0.0], (side, scores)
            if rnd:
                times[side].append(took)
    if skyrl is not None:
        assert skyrl.ask("end").get("rewards") == [1.0, 0.0], "skyrl-gym's verdicts differ"
    return times


def skyrl_session(python: Path, task: Task, rows: int, tmp: Path) -> PeerSession | str:
    """skyrl-gym's reward function in its venv on a copy of ``task``'s database, or why not."""
    if not python.exists():
        return f"not installed ({python} not found): run `make bench-peers`"
    db = tmp / f"skyrl-large-{rows}.sqlite"
    shutil.copyfile(str(task.meta["db_path"]), db)
    cases = [
        {
            "gold": str(task.answer),
            "action": f"<think>x</think><solution>{a}</solution>",
            "db_file": str(db),
            "timeout_s": 5,
        }
        for a in answers(rows)
    ]
    job = tmp / f"job-skyrl-large-{rows}.json"
    job.write_text(json.dumps({"peer": "skyrl", "kind": "sql_reward", "fresh_sql": True, "cases": cases}))
    session = PeerSession(str(python), job, cwd=tmp)
    if session.error:
        session.close()
        return session.error
    return session


def run(sizes: list[int], reps: int, tmp: Path, skyrl_python: Path) -> None:
    print(f"SQL judges on large results: {CONDITIONS}")
    for rows in sizes:
        task = build(tmp / f"large-{rows}.sqlite", rows)
        skyrl = skyrl_session(skyrl_python, task, rows, tmp)
        try:
            if isinstance(skyrl, str):
                print(f"{rows:>7,} result rows  skyrl-gym calculate_reward_single: skipped, {skyrl}")
                row = f"the 4 SQL judges of the default on a {rows:,}-row result vs skyrl-gym"
                skipped("sql", row, "skyrl-gym calculate_reward_single", f"skyrl-gym {skyrl}", "ms/check")
            else:
                print(f"{rows:>7,} result rows  skyrl-gym {skyrl.hello.get('version')} calculate_reward_single")
            times = measure(task, rows, reps, skyrl if isinstance(skyrl, PeerSession) else None)
        finally:
            if isinstance(skyrl, PeerSession):
                skyrl.close()
        baselines = [("baseline", "plain sqlite3 fetchall + set compare per check (skyrl-gym's approach)")]
        if "skyrl" in times:
            baselines.append(("skyrl", "skyrl-gym calculate_reward_single (its own venv)"))
        for side, label in LABELS.items():
            ours = median(times[side]) * 1e3
            for base_side, base_name in baselines:
                base_t = times[base_side]
                base = median(base_t) * 1e3
                print(
                    f"{rows:>7,} result rows  {label:<36} {ours:8.1f} ms/check  {base_side:<8} {base:8.1f} ms/check"
                    f"  {base / ours:5.2f}x   ({reps} rounds)"
                )
                emit(
                    "sql",
                    f"{label} on a {rows:,}-row result" + (" vs skyrl-gym" if base_side == "skyrl" else ""),
                    ours,
                    base,
                    base_name,
                    "ms/check",
                    "lower",
                    f"ours {spread([t * 1e3 for t in times[side]])}, {base_side} {spread([t * 1e3 for t in base_t])}",
                    note=CONDITIONS + ("" if side.endswith(" 0") else f"; {SUITE_NOTE}"),
                )
