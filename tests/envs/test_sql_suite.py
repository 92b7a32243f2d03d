"""Test-suite execution match (neighbour databases), one deadline per verdict, large results."""

from __future__ import annotations

import random
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from prm_gym.core.parsing import format_answer, parse_action
from prm_gym.core.tasks import Task
from prm_gym.envs.sql import results
from prm_gym.envs.sql.env import SQLEnv
from prm_gym.envs.sql.judges import DATABASES
from prm_gym.envs.sql.neighbours import build_neighbour, neighbours
from prm_gym.envs.sql.results import ALIGN_SAMPLE
from prm_gym.envs.sql.tasks import generate_sql_tasks
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

SQL_JUDGES = ["rule/execution_match", "rule/sql_syntax", "rule/sql_schema_link", "rule/sql_result_overlap"]
ENDLESS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


def literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def forgery(rows: list[tuple[Any, ...]]) -> str:
    """The rows an agent saw through run_query, typed back as a query of literals."""
    if not rows:
        return "SELECT 1 WHERE 0"
    return " UNION ALL ".join("SELECT " + ", ".join(literal(v) for v in r) for r in rows)


def rows_of(task: Task) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(task.meta["db_path"])
    try:
        return conn.execute(str(task.answer)).fetchall()
    finally:
        conn.close()


def _turn(task: Task, answer: str) -> Turn:
    return Turn(task, 0, format_answer(answer), parse_action(format_answer(answer)), final=True)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    return list(generate_sql_tasks(300, seed=3, split="test", cache_dir=tmp_path_factory.mktemp("dbs")))


def test_literal_rows_copied_from_run_query_score_zero(tasks: list[Task]) -> None:
    """The issue's forgery, through the env: the gold's rows typed back as literals score 0, while
    on the task's database alone (neighbours=0, what the old judge did) they scored 1."""
    task = next(t for t in tasks if len(rows_of(t)) >= 2)
    answer = f"<answer>{forgery(rows_of(task))}</answer>"
    for count, want in ((3, 0.0), (0, 1.0)):
        env = SQLEnv([task], judge="rule/execution_match", judge_kwargs={"rule/execution_match": {"neighbours": count}})
        try:
            env.reset(seed=0)
            _, reward, terminated, _, info = env.step(answer)
        finally:
            env.close()
        assert terminated and info["reward_status"] == "ok" and reward == want, info["judge"]
    detail = make_judge("rule/execution_match").score([_turn(task, forgery(rows_of(task)))])[0].detail
    assert "neighbour" in detail and "does not compute the answer" in detail


def test_generated_tasks_gold_scores_one_and_every_forgery_zero(tasks: list[Task]) -> None:
    """300 generated tasks (all schemas and levels): the gold query still scores 1.0 on every judge
    that compares results, and the literal rows of its answer score 0 on execution match."""
    match, overlap = make_judge("rule/execution_match"), make_judge("rule/sql_result_overlap")
    forged = []
    for task in tasks:
        gold = _turn(task, str(task.answer))
        assert match.score([gold])[0].score == 1.0 and overlap.score([gold])[0].score == 1.0, task.answer
        if match.score([_turn(task, forgery(rows_of(task)))])[0].score != 0.0:
            forged.append(task.answer)
    assert forged == []
    assert {t.meta.get("level") for t in tasks} >= {1, 2, 3, 4} or len({t.meta["db_id"] for t in tasks}) >= 3


def test_neighbours_are_deterministic_same_schema_other_rows(tasks: list[Task], tmp_path: Path) -> None:
    src = Path(tasks[0].meta["db_path"])
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    build_neighbour(src, a, random.Random("seed"))
    build_neighbour(src, b, random.Random("seed"))
    dump = {p: list(sqlite3.connect(p).iterdump()) for p in (src, a, b)}
    assert dump[a] == dump[b] and dump[a] != dump[src]
    schema = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    assert sqlite3.connect(a).execute(schema).fetchall() == sqlite3.connect(src).execute(schema).fetchall()
    first, again = neighbours(src, 3), neighbours(src, 3)
    assert first == again and len(set(first)) == 3 and all(p.is_file() for p in first)


def test_one_deadline_for_a_whole_verdict(tasks: list[Task]) -> None:
    """A query that never ends, judged by three SQL judges each with its own time limit and on four
    databases: it runs under the first judge's deadline once, for all of them (the old judges ran
    it again for each judge whose limit differed: 1 + 1.5 + 2 s here), and it is the agent's 0."""
    limits = {"rule/execution_match": 1.0, "rule/sql_syntax": 1.5, "rule/sql_result_overlap": 2.0}
    env = SQLEnv(
        [tasks[0]],
        judge="rule/execution_match + 0.1*rule/sql_syntax + 0.1*rule/sql_result_overlap",
        judge_kwargs={name: {"timeout_s": s} for name, s in limits.items()},
    )
    try:
        env.reset(seed=0)
        t0 = time.perf_counter()
        _, reward, _, _, info = env.step(f"<answer>{ENDLESS}</answer>")
        took = time.perf_counter() - t0
    finally:
        env.close()
    assert info["reward_status"] == "ok" and reward == pytest.approx(0.05)  # parses: half the syntax credit
    assert info["judge"]["rule/execution_match"]["score"] == 0.0
    print(f"endless answer, three SQL judges (limits 1, 1.5, 2 s), four databases: the verdict took {took:.2f} s")
    assert took < 1.9, f"the verdict took {took:.2f} s for one deadline of 1 s"


def test_a_slow_query_shares_one_deadline_across_the_neighbours(tasks: list[Task]) -> None:
    """A right answer that takes seconds on each of four databases (it counts to 30 million)
    ends at the verdict's one deadline of 1 s for all of them, scored 0 (on one database it matched)."""
    slow = (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 30000000) "
        f"SELECT * FROM ({tasks[0].answer}) WHERE (SELECT count(*) FROM r) > 0"
    )
    judge = make_judge("rule/execution_match", timeout_s=1.0)
    t0 = time.perf_counter()
    verdict = judge.score([_turn(tasks[0], slow)])[0]
    took = time.perf_counter() - t0
    print(f"a seconds-per-database answer, one 1 s deadline over four databases: {took:.2f} s, {verdict.detail!r}")
    assert took < 1.9 and verdict.score == 0.0 and "time limit" in verdict.detail, (took, verdict)


def _events_db(path: Path, columns: str, rows: int, values: str) -> Path:
    """A SQLite file at ``path`` with one ``events`` table of ``rows`` rows, row ``n``'s ``values``."""
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE events ({columns})")
    conn.execute(
        f"INSERT INTO events WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < {rows}) "
        f"SELECT {values} FROM r"
    )
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.sqlite"
    return _events_db(path, "id INTEGER PRIMARY KEY, kind TEXT, amount REAL", 150000, "n, 'kind' || (n % 7), n * 0.5")


def test_a_gold_result_past_100k_rows_is_judged(big_db: Path) -> None:
    """150,000 result rows: the old 100k bound made the gold query fail; now it is judged, both ways."""
    task = Task("big", "q", "SELECT kind, amount FROM events", {"db_path": str(big_db), "db_id": "big"})
    # a generous deadline: this checks the row bound, not speed (150k rows plus neighbours took
    # about 1 s here, more than the default 5 s on a loaded 2-core machine)
    judge = make_judge("rule/execution_match", timeout_s=60.0)
    assert judge.score([_turn(task, "SELECT amount, kind FROM events ORDER BY id DESC")])[0].score == 1.0
    assert judge.score([_turn(task, "SELECT kind, amount FROM events WHERE id > 1")])[0].score == 0.0


def test_a_gold_result_past_the_bound_is_a_flagged_verdict_not_a_zero(big_db: Path) -> None:
    task = Task("big", "q", "SELECT kind, amount FROM events", {"db_path": str(big_db), "db_id": "big"})
    env = SQLEnv([task], judge="rule/execution_match", judge_kwargs={"rule/execution_match": {"max_rows": 100_000}})
    try:
        env.reset(seed=0)
        _, reward, _, _, info = env.step("<answer>SELECT kind, amount FROM events</answer>")
    finally:
        env.close()
    error = info["judge"]["rule/execution_match"]["error"]
    assert info["reward_status"] == "infra_error" and reward == 0.0
    assert error.startswith("GoldTooLarge") and "more than 100000 rows" in error and "max_rows" in error


def test_the_judges_share_the_gold_statistics(big_db: Path) -> None:
    """The gold's multiset is computed once per task, not once per verdict."""
    task = Task("big", "q", "SELECT kind FROM events", {"db_path": str(big_db), "db_id": "big"})
    judge = make_judge("rule/execution_match", neighbours=0)
    judge.score([_turn(task, "SELECT kind FROM events WHERE id > 0")])
    gold = DATABASES.gold(_turn(task, "x"), 5.0, judge.limits, 0).results[0]  # type: ignore[attr-defined]
    counter = gold.counter()
    judge.score([_turn(task, "SELECT kind FROM events WHERE id < 150001")])
    assert gold.counter() is counter


class _CountingCounter(Counter):  # type: ignore[type-arg]
    """A Counter that adds up how many values all its instances were given."""

    counted = 0

    def update(self, iterable: Any = None, /, **kwds: Any) -> None:
        before = self.total()
        super().update(iterable, **kwds)
        _CountingCounter.counted += self.total() - before


@pytest.fixture(scope="module")
def wide_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wide") / "wide.sqlite"
    columns = "id INTEGER PRIMARY KEY, kind TEXT, amount REAL, qty INTEGER"
    return _events_db(path, columns, 4000, "n, 'kind-' || (n * 7919 % 997), round((n * 31 % 1000) / 7.0, 2), n % 37")


ROWS, SAMPLE = 3000, ALIGN_SAMPLE  # rows of the gold's result; rows partial credit aligns columns on


@pytest.mark.parametrize(
    ("answer", "scores", "most_counted"),
    [
        # the gold's rows in its order: equal rows need no multiset at all
        ("SELECT kind, amount, qty FROM events WHERE id <= 3000 AND 1", [1.0, 1.0, 1.0, 1.0], 0),
        # off by one row: the rows' multiset, then each column's in the first SAMPLE rows (partial credit)
        (
            "SELECT kind, amount, qty FROM events WHERE id > 1 AND id <= 3001",
            [0.0, 1.0, 1.0, 0.9997],
            ROWS + 3 * SAMPLE,
        ),
        # columns and rows reordered: the rows' multiset, each column's, the reordered rows' (execution
        # match), the columns' in the first SAMPLE rows and the aligned rows' (partial credit)
        (
            "SELECT qty, kind, amount FROM events WHERE id <= 3000 ORDER BY id DESC",
            [1.0, 1.0, 1.0, 1.0],
            ROWS + 3 * ROWS + ROWS + 3 * SAMPLE + ROWS,
        ),
    ],
)
def test_a_verdict_does_work_linear_in_the_rows_and_reuses_the_gold_statistics(
    wide_db: Path, answer: str, scores: list[float], most_counted: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted, not timed: in a verdict of the four SQL judges each submitted row's size is measured
    once, and only the multisets listed above are built (values counted into Counters); the gold's
    statistics are computed on the first verdict only, never again."""
    task = Task("wide", "q", f"SELECT kind, amount, qty FROM events WHERE id <= {ROWS}", {"db_path": str(wide_db)})
    judges = [make_judge(j, neighbours=0) for j in SQL_JUDGES]
    measured: list[int] = []
    chunk_bytes = results._chunk_bytes
    monkeypatch.setattr(results, "_chunk_bytes", lambda chunk: measured.append(len(chunk)) or chunk_bytes(chunk))
    monkeypatch.setattr(results, "Counter", _CountingCounter)
    for warm in (True, False):  # the first verdict also fetches the gold and computes its statistics
        measured.clear()
        _CountingCounter.counted = 0
        turn = _turn(task, f"WITH warm AS (SELECT 1) {answer}" if warm else answer)
        assert [round(j.score([turn])[0].score, 4) for j in judges] == scores
    assert sum(measured) == ROWS  # the submitted rows measured once; the gold's (cached) not again
    assert _CountingCounter.counted <= most_counted, _CountingCounter.counted
