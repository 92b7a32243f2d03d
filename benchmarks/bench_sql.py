"""Execution-match checks per second on the generated databases, and agreement with skyrl-gym.

Builds a shared test set of (gold, predicted) pairs over generated tasks: the gold query itself,
DISTINCT / reordered / LIMITed / wrong-filter / broken / writing variants. It then measures

* ``rule/execution_match`` (warm gold cache, one guarded connection per database), against
* a baseline measured in the same run: the usual per-check approach (open a connection, run both
  queries, compare sets of rows), as in skyrl-gym's SQL reward;

every timed round giving both sides the same predicted queries in a text no earlier round used
(``fresh_text.fresh_sql``: an unused CTE named after the round), so no cache keyed by the query
text answers; rounds alternate between the two sides;

and, if a Python with ``skyrl-gym`` is given (``--skyrl-python /tmp/skyrl-venv/bin/python``),
runs skyrl-gym's own ``calculate_reward_single`` on the same cases and counts disagreements
with our ``mode="set"`` verdicts (which must be zero) and ``mode="multiset"`` verdicts (which
differ by design where duplicates or the gold ORDER BY matter).

Last, the judges on large results (``--large 10000,95000``, result rows; ``sql_large.py``): per-check
time of ``rule/execution_match`` and of the four SQL judges of the default judge (with their 3
neighbour databases, and with none) against the same plain-sqlite3 baseline and, where installed,
skyrl-gym's own ``calculate_reward_single``, rounds alternated, conditions printed.

Usage: ``python benchmarks/bench_sql.py [--tasks 300] [--reps 5] [--skyrl-python PATH] [--large 10000,95000]
[--only all|checks|large]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import sql_large
from fresh_text import fresh_sql
from peer_client import not_installed, peer_python
from result_line import emit, skipped, spread

from prm_gym.core.parsing import format_answer, parse_action
from prm_gym.core.tasks import Task
from prm_gym.envs.sql.judges import ExecutionMatchJudge
from prm_gym.envs.sql.tasks import generate_sql_tasks
from prm_gym.rewards.types import Turn

SKYRL_SCRIPT = """
import json, sys
from skyrl_gym.envs.sql.utils import calculate_reward_single
cases = json.load(open(sys.argv[1]))
out = [calculate_reward_single("<think>x</think><solution>" + c["pred"] + "</solution>", c["gold"], c["db"], 10)
       for c in cases]
json.dump(out, sys.stdout)
"""


def variants(gold: str) -> list[str]:
    """Predicted queries near ``gold``: right, equivalent, wrong in several ways, broken."""
    out = [
        gold,
        gold.replace("SELECT ", "SELECT DISTINCT ", 1) if "DISTINCT" not in gold else gold.replace("DISTINCT ", ""),
    ]
    out.append(gold + " LIMIT 1" if "LIMIT" not in gold else gold.rsplit("LIMIT", 1)[0] + "LIMIT 1")
    out.append(gold.replace(" DESC", " ASC") if " DESC" in gold else f"SELECT * FROM ({gold}) ORDER BY 1 DESC")
    out.append(gold.replace(">", "<") if ">" in gold else gold.replace("=", "<>", 1))
    out += [gold.replace("SELECT", "SELEC", 1), f"SELECT * FROM ({gold}) UNION ALL SELECT * FROM ({gold})"]
    return out


def build_cases(n_tasks: int, cache: Path) -> list[tuple[Task, str]]:
    tasks = generate_sql_tasks(n_tasks, seed=11, split="test", cache_dir=cache)
    return [(t, pred) for t in tasks for pred in variants(str(t.answer))]


def baseline_check(db_path: str, gold: str, pred: str) -> bool:
    """The usual per-check approach: fresh connection, both queries, compare row sets."""
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


def alternated(cases: list[tuple[Task, str]], reps: int) -> dict[str, list[float]]:
    """Seconds per round of our judge (on the task's database alone, like the baseline, and with its
    3 neighbour databases, as shipped) and of the baseline, rounds alternated, each round (and the
    warm-up) on predicted queries in a text of its own."""
    judges = {"one": ExecutionMatchJudge(neighbours=0), "suite": ExecutionMatchJudge()}
    times: dict[str, list[float]] = {"one": [], "suite": [], "baseline": []}
    for rnd in range(reps + 1):  # round 0 warms up
        sides = ["one", "suite", "baseline"]
        for side in sides[rnd % 3 :] + sides[: rnd % 3]:
            preds = [fresh_sql(p, f"r{rnd}_{side}_{i}") for i, (_, p) in enumerate(cases)]
            turns = [
                Turn(t, 0, format_answer(p), parse_action(format_answer(p)), final=True)
                for (t, _), p in zip(cases, preds, strict=True)
            ]
            t0 = time.perf_counter()
            if side == "baseline":
                for (t, _), p in zip(cases, preds, strict=True):
                    baseline_check(str(t.meta["db_path"]), str(t.answer), p)
            else:
                verdicts = judges[side].score(turns)
            took = time.perf_counter() - t0
            if rnd == 0 and side != "baseline":  # the fresh text changes no verdict
                plain = [Turn(t, 0, format_answer(p), parse_action(format_answer(p)), final=True) for t, p in cases]
                assert [v.score for v in verdicts] == [v.score for v in judges[side].score(plain)]
            if rnd:
                times[side].append(took)
    return times


def report(name: str, n: int, times: list[float]) -> tuple[float, str]:
    rates = [n / t for t in times]
    med = statistics.median(rates)
    print(f"{name:<40} {med:>10.0f} checks/s  (min {min(rates):.0f}, max {max(rates):.0f}, {len(times)} reps)")
    return med, spread(rates)


def agreement(cases: list[tuple[Task, str]], turns: list[Turn], skyrl_python: str, tmp: Path) -> None:
    payload = [{"gold": str(t.answer), "pred": p, "db": str(t.meta["db_path"])} for t, p in cases]
    (tmp / "cases.json").write_text(json.dumps(payload))
    (tmp / "skyrl_check.py").write_text(SKYRL_SCRIPT)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [skyrl_python, str(tmp / "skyrl_check.py"), str(tmp / "cases.json")],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    skyrl_s = time.perf_counter() - t0
    theirs = [float(x) for x in json.loads(proc.stdout.strip().splitlines()[-1])]
    for mode in ("set", "multiset"):
        # skyrl-gym compares on the task's database alone: so do we here (neighbours=0)
        ours = [v.score for v in ExecutionMatchJudge(mode=mode, neighbours=0).score(turns)]
        diff = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
        print(f"agreement with skyrl-gym, mode={mode:<8}: {len(cases) - len(diff)}/{len(cases)} cases agree")
        emit(
            "sql",
            f"reward agreement with skyrl-gym SQL reward, mode={mode}",
            len(cases) - len(diff),
            len(cases),
            "all cases (skyrl-gym calculate_reward_single verdicts)",
            "cases agreeing",
            "higher",
            note="multiset differs by design on duplicates/ORDER BY" if mode == "multiset" else "",
        )
        for i in diff[:3]:
            print(f"    e.g. ours={ours[i]} skyrl={theirs[i]}  gold={cases[i][0].answer!r}  pred={cases[i][1]!r}")
    print(f"skyrl-gym calculate_reward_single: {len(cases) / skyrl_s:.0f} checks/s (one run, incl. interpreter start)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skyrl-python", default="", help="default: $SKYRL_PYTHON, else make bench-peers' venv")
    ap.add_argument("--large", default="10000,95000", help="result sizes (rows) of the large-result rows; '' skips")
    ap.add_argument(
        "--only", choices=["all", "checks", "large"], default="all", help="run only the generated checks or large rows"
    )
    args = ap.parse_args()
    skyrl_python = peer_python("skyrl", args.skyrl_python)
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmpdir:
        tmp = Path(tmpdir)
        sizes = [int(x) for x in args.large.split(",") if x.strip()] if args.only != "checks" else []
        if args.only == "large":
            sql_large.run(sizes, args.reps, tmp, skyrl_python)
            return
        cases = build_cases(args.tasks, tmp / "dbs")
        turns = [Turn(t, 0, format_answer(p), parse_action(format_answer(p)), final=True) for t, p in cases]
        print(
            f"{len(cases)} execution-match checks over {len({t.meta['db_path'] for t, _ in cases})} generated databases"
        )
        times = alternated(cases, args.reps)
        base = report("baseline: fresh connection + set compare", len(cases), times["baseline"])
        common = (
            "fresh connection + set compare per check (skyrl-gym's approach); both sides get query text no "
            "earlier round used (no text cache answers), rounds alternated"
        )
        for side, row, label, note in (
            ("one", "execution-match checks", "rule/execution_match(neighbours=0)", "both on the task's database"),
            (
                "suite",
                "execution-match checks, test suite (3 neighbour databases)",
                "rule/execution_match (3 neighbours)",
                "ours as shipped: also on 3 neighbour databases wherever the task's database matches "
                "(test-suite execution match; the baseline compares on one database)",
            ),
        ):
            ours = report(label, len(cases), times[side])
            print(f"ratio ours / baseline: {ours[0] / base[0]:.2f}x")
            spreads = f"ours {ours[1]}, baseline {base[1]}"
            emit("sql", row, ours[0], base[0], common, "checks/s", "higher", spreads, note)
        if not skyrl_python.exists():
            why = f"skyrl-gym {not_installed(skyrl_python)}"
            print(f"agreement with skyrl-gym: skipped, {why}")
            skipped("sql", "reward agreement with skyrl-gym SQL reward", "skyrl-gym", why, "cases agreeing")
        else:
            shutil.copytree(tmp / "dbs", tmp / "skyrl-dbs")  # skyrl opens databases read-write
            sk_cases = [
                (
                    Task(
                        t.id,
                        t.prompt,
                        t.answer,
                        {**t.meta, "db_path": str(tmp / "skyrl-dbs" / Path(t.meta["db_path"]).name)},
                    ),
                    p,
                )
                for t, p in cases
            ]
            agreement(sk_cases, turns, str(skyrl_python), tmp)
        if sizes:
            sql_large.run(sizes, args.reps, tmp, skyrl_python)


if __name__ == "__main__":
    main()
