"""The RESULT-line convention, the run_all summary table, and bench_envs' peer handling."""

from __future__ import annotations

import gc
import importlib.util
import json
import sqlite3
import subprocess
import sys
import weakref
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SKYRL_PYTHON = BENCH.parent / ".venv-peers" / "skyrl" / "bin" / "python"  # made by `make bench-peers`
ENVS_CMD = [sys.executable, str(BENCH / "bench_envs.py"), "--reps", "1", "--kinds", "math,search,sql"]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}_under_test", BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _results(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line[len("RESULT ") :]) for line in stdout.splitlines() if line.startswith("RESULT ")]


def test_ratio_is_how_many_times_better_ours_is() -> None:
    rl = _load("result_line")
    assert rl.ratio(10.0, 5.0, "higher") == 2.0
    assert rl.ratio(5.0, 10.0, "lower") == 2.0
    assert rl.ratio(10.0, 5.0, "lower") == 0.5
    assert rl.ratio(1.0, 0.0, "higher") is None
    with pytest.raises(ValueError, match="higher"):
        rl.ratio(1.0, 1.0, "faster")


def test_emit_and_skipped_lines_parse_back(capsys: pytest.CaptureFixture[str]) -> None:
    rl = _load("result_line")
    rl.emit("sql", "checks", 300.0, 100.0, "fresh connection", "checks/s", "higher", rl.spread([290.0, 310.0]))
    rl.skipped("envs", "prm/SQL-v0 vs GEM", "GEM", "GEM has no SQL env")
    out = capsys.readouterr().out + "RESULT {not json\nsome human table line\n"
    records = rl.parse(out)
    assert [r["row"] for r in records] == ["checks", "prm/SQL-v0 vs GEM"]
    assert records[0]["ratio"] == 3.0 and records[0]["spread"] == "290-310"
    assert records[1]["ratio"] is None and records[1]["skipped"] == "GEM has no SQL env"


def test_summary_table_lists_rows_ratios_and_reasons() -> None:
    rows = [
        {"bench": "sql", "row": "checks", "ours": 3000.0, "baseline": 1000.0, "baseline_name": "fresh conn",
         "unit": "checks/s", "better": "higher", "ratio": 3.0, "spread": "2900-3100"},
        {"bench": "envs", "row": "prm/SQL-v0 vs GEM", "ours": None, "baseline": None, "baseline_name": "GEM",
         "unit": "us", "better": None, "ratio": None, "spread": "", "skipped": "GEM has no SQL env"},
        {"bench": "envs", "row": "step", "ours": 8.0, "baseline": 2.0, "baseline_name": "skyrl-gym", "unit": "us",
         "better": "lower", "ratio": 0.25, "spread": "", "note": "ours parses the whole turn"},
    ]  # fmt: skip
    failures = "[('bench_x.py', 'exit 1 (boom)')]"
    code = f"import json, sys, run_all; print('\\n'.join(run_all.summary(json.loads(sys.argv[1]), {failures})))"
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(rows)], cwd=BENCH, capture_output=True, text=True, check=True
    )
    table = proc.stdout
    assert (
        "| sql | checks | **3.00x** | 3,000 | 1,000 | checks/s (higher is better) | fresh conn | 2900-3100 |" in table
    )
    assert "- envs / prm/SQL-v0 vs GEM vs GEM: GEM has no SQL env" in table
    assert "- bench_x.py: exit 1 (boom)" in table
    assert "- envs / step vs skyrl-gym: 0.25x; ours parses the whole turn" in table
    assert "- sql / checks" not in table  # a row the suite wins is not listed as behind
    assert "prm/SQL-v0 vs GEM |" not in table  # a skipped row is not in the measured table


def test_peer_worker_reports_a_missing_peer_as_an_error(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    case = {"prompt": "What is 1+1?", "gold": "2", "action": "\\boxed{2}", "db_id": ""}
    job.write_text(json.dumps({"peer": "gem", "kind": "math", "reps": 1, "cases": [case]}))
    proc = subprocess.run(
        [sys.executable, str(BENCH / "peer_worker.py"), str(job)], capture_output=True, text=True, check=True
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" in report and "ModuleNotFoundError" in report["error"]  # no gem-llm in the project venv


def test_bench_envs_reports_missing_peers_as_skipped_rows(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-venv" / "python")
    proc = subprocess.run(
        [*ENVS_CMD, "--tasks", "3", "--gem-python", missing, "--skyrl-python", missing],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    records = _results(proc.stdout)
    assert len(records) == 6  # 3 envs x 2 peers, none measurable
    assert all(r["ratio"] is None and "run `make bench-peers`" in str(r["skipped"]) for r in records)
    assert "prm/SQL-v0 (sql): episodes per pass (all: 6)" in proc.stdout


def test_bench_envs_reports_a_broken_peer_interpreter_as_skipped_rows(tmp_path: Path) -> None:
    not_a_program = tmp_path / "python"
    not_a_program.write_text("not an interpreter")  # exists, but cannot be executed
    proc = subprocess.run(
        [*ENVS_CMD, "--tasks", "2", "--gem-python", str(not_a_program), "--skyrl-python", "no/such/python"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    records = _results(proc.stdout)
    gem = [r for r in records if r["baseline_name"] == "GEM"]
    assert len(gem) == 3 and all("PermissionError" in str(r["skipped"]) for r in gem)
    assert all("make bench-peers" in str(r["skipped"]) for r in records if r["baseline_name"] == "skyrl-gym")


def test_settle_collects_cyclic_garbage_and_leaves_the_collector_on() -> None:
    rl = _load("result_line")

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the cyclic collector frees it
    alive = weakref.ref(a)
    gc.disable()  # so no automatic collection frees the cycle before settle() does
    try:
        del a, b
        assert alive() is not None
        rl.settle()
        assert alive() is None
    finally:
        gc.enable()


@pytest.mark.skipif(not SKYRL_PYTHON.exists(), reason="skyrl-gym not installed: run `make bench-peers`")
def test_bench_envs_against_skyrl_agrees_on_every_case(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*ENVS_CMD, "--tasks", "4", "--gem-python", str(tmp_path / "none"), "--skyrl-python", str(SKYRL_PYTHON)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    records = [r for r in _results(proc.stdout) if "skyrl" in str(r["baseline_name"])]
    agreement = [r for r in records if "agreement" in str(r["row"])]
    assert len(agreement) == 3 and all(r["ours"] == r["baseline"] == 8 for r in agreement)
    timings = [r for r in records if r["unit"] == "us"]  # 3 steps per env, and each env's construction
    assert len(timings) == 12 and all(float(str(r["ours"])) > 0 and float(str(r["baseline"])) > 0 for r in timings)
    math = [r for r in records if "GSM8kEnv," in str(r["baseline_name"])]
    assert all("same 70 characters of reasoning" in str(r["baseline_name"]) for r in math)


def _fake_worker(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake-python"
    script.write_text('#!/bin/sh\necho \'{"ready": true, "env": "FakeEnv", "version": "0"}\'\nread line\n' + body)
    script.chmod(0o755)
    return script


def test_peer_session_turns_a_crash_or_a_hang_into_an_error(tmp_path: Path) -> None:
    client = _load("peer_client")
    job = tmp_path / "job.json"
    job.write_text("{}")
    crashing = client.PeerSession(str(_fake_worker(tmp_path, "echo boom >&2\nexit 3\n")), job, cwd=tmp_path)
    assert crashing.hello["env"] == "FakeEnv" and not crashing.error
    assert crashing.ask("pass") == {"error": "worker exit 3: boom"}
    assert crashing.ask("end")["error"] == "worker exit 3: boom"  # stays failed, no new write
    crashing.close()
    crashing.close()
    hanging = client.PeerSession(str(_fake_worker(tmp_path, "sleep 30\n")), job, cwd=tmp_path, timeout_s=1.0)
    assert hanging.ask("pass")["error"].startswith("worker exit -9")
    hanging.close()


def test_update_replaces_only_the_rerun_benches_rows_and_raw_output() -> None:
    merge = _load("page_merge")
    old = "\n".join(
        [
            "# Benchmarks", "", "Machine: old box.", "",
            "## Summary", "", "| bench | row | ratio |", "|---|---|---:|",
            "| async | wall | **4.95x** |", "| envs | step | **0.04x** |", "| sql | checks | **5.43x** |",
            "", merge.BEHIND, "", "- envs / step vs skyrl-gym: 0.04x; old reason",
            "", merge.SKIPPED, "", "- envs / SQL vs GEM vs GEM: no sql env", "- bench_sql.py: exit 1 (boom)",
            "", "## Raw output", "", "### async", "", "old async", "", "### envs", "", "old envs", "",
        ]
    )  # fmt: skip
    new = "\n".join(
        [
            "# Benchmarks", "", "Machine: new box.", "",
            "## Summary", "", "| bench | row | ratio |", "|---|---|---:|",
            "| envs | step | **1.20x** |", "| envs | episode | **2.00x** |",
            "", merge.SKIPPED, "", "- envs / SQL vs GEM vs GEM: still no sql env",
            "", "## Raw output", "", "### envs", "", "new envs", "",
        ]
    )  # fmt: skip
    page = merge.merge_pages(old, new, {"envs"}, "Rows of envs rerun now.")
    assert "Machine: old box.\nRows of envs rerun now.\n" in page
    assert "| async | wall | **4.95x** |\n| envs | step | **1.20x** |\n| envs | episode | **2.00x** |\n| sql |" in page
    assert "0.04x" not in page and "old reason" not in page and merge.BEHIND not in page  # envs no longer behind
    assert "- envs / SQL vs GEM vs GEM: still no sql env\n- bench_sql.py: exit 1 (boom)" in page
    assert "### async\n\nold async\n" in page and "### envs\n\nnew envs\n" in page and "old envs" not in page


def test_run_all_update_refuses_without_only_or_an_existing_page(tmp_path: Path) -> None:
    cmd = [sys.executable, str(BENCH / "run_all.py"), "--update", "--out", str(tmp_path / "none.md")]
    for extra in ([], ["--only", "envs"]):
        proc = subprocess.run([*cmd, *extra], capture_output=True, text=True, check=False)
        assert proc.returncode == 2 and "--update needs --only" in proc.stderr


def test_fresh_sql_changes_the_text_but_not_the_rows(tmp_path: Path) -> None:
    fresh = _load("fresh_text").fresh_sql
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    conn.execute("CREATE TABLE t (a INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?)", [(3,), (1,), (2,)])
    for sql in ["SELECT a FROM t ORDER BY a DESC", "WITH x AS (SELECT a FROM t) SELECT * FROM x WHERE a > 1"]:
        texts = {fresh(sql, "r0_1"), fresh(sql, "r1_1"), fresh(sql, "r1_2")}
        assert len(texts) == 3 and sql not in texts
        assert all(conn.execute(t).fetchall() == conn.execute(sql).fetchall() for t in texts)
    with pytest.raises(sqlite3.OperationalError):
        conn.execute(fresh("SELEC a FROM t", "r0"))  # a broken query stays broken


def test_before_after_note_pairs_each_row_with_its_old_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # run_all imports its siblings, as when run as a script
    run_all = _load("run_all")
    old_rows = [
        {"bench": "envs", "row": "step", "ours": 4.0, "baseline": 2.0, "baseline_name": "GEM", "unit": "us",
         "better": "lower", "ratio": 0.5, "spread": ""},
        {"bench": "envs", "row": "step", "ours": 4.0, "baseline": 1.0, "baseline_name": "skyrl", "unit": "us",
         "better": "lower", "ratio": 0.25, "spread": ""},
        {"bench": "search", "row": "qps (vs Lucene)", "ours": 10.0, "baseline": 5.0, "baseline_name": "pyserini 2",
         "unit": "q/s", "better": "higher", "ratio": 2.0, "spread": ""},
    ]  # fmt: skip
    old_page = "\n".join(run_all.page_head() + run_all.summary(old_rows, []))
    new_rows = [
        {**old_rows[0], "ours": 1.0, "ratio": 2.0},
        {**old_rows[1], "ours": 2.0, "ratio": 0.5},
        {**old_rows[2], "row": "qps (vs Lucene), 2 threads", "formerly": "qps (vs Lucene)", "ratio": 3.0},
        {**old_rows[2], "row": "brand new", "ratio": 1.5},
    ]
    lines = run_all.before_after(old_page, new_rows)
    table = [ln for ln in lines if ln.startswith("| envs") or ln.startswith("| search")]
    assert table == [
        "| envs | step | 0.50x (4 / 2) | 2.00x (1 / 2) | us |",
        "| envs | step | 0.25x (4 / 1) | 0.50x (2 / 1) | us |",
        "| search | qps (vs Lucene), 2 threads | 2.00x (10 / 5) | 3.00x (10 / 5) | q/s |",
        "| search | brand new | new row | 1.50x (10 / 5) | q/s |",
    ]
    merge = _load("page_merge")
    closed = old_page + "\n" + "\n".join(lines)
    assert merge.split_page(closed).rows == merge.split_page(old_page).rows  # the note is not a summary row


def test_update_replaces_only_the_rerun_benches_rows_of_the_before_after_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # run_all imports its siblings, as when run as a script
    run_all = _load("run_all")
    row = {"baseline_name": "peer", "unit": "us", "better": "lower", "spread": ""}
    first = [
        {**row, "bench": "envs", "row": "step", "ours": 4.0, "baseline": 2.0, "ratio": 0.5},
        {**row, "bench": "sql", "row": "checks", "ours": 2.0, "baseline": 4.0, "ratio": 2.0},
    ]
    head = run_all.page_head()
    full = run_all.assemble(head, run_all.summary(first, []), first, "")  # a full run, on no earlier page
    assert "| envs | step | new row | 0.50x (4 / 2) | us |" in full
    rerun = [{**first[1], "ours": 1.0, "ratio": 4.0}]
    for before in (full, "# an older page\n"):  # --before: the default (the page itself), or another page
        page = run_all.assemble(head, run_all.summary(rerun, []), rerun, before, full, {"sql"}, "sql")
        note = page.split(run_all.CLOSING)[1]
        assert page.count(run_all.CLOSING) == 1
        assert "| envs | step | new row | 0.50x (4 / 2) | us |" in note  # not rerun: kept as it was
        sql = [line for line in note.splitlines() if line.startswith("| sql")]
        assert sql == [f"| sql | checks | {'2.00x (2 / 4)' if before == full else 'new row'} | 4.00x (1 / 4) | us |"]
        assert note.index("| envs |") < note.index("| sql |") and "partial rerun" in note
        assert "| envs | step | **0.50x** |" in page and "| sql | checks | **4.00x** |" in page  # summary merged


def test_update_with_bench_args_replaces_only_the_rows_that_run_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--only envs --update --args 'envs=--kinds math'`: the envs rows of other kinds stay."""
    monkeypatch.syspath_prepend(str(BENCH))
    run_all = _load("run_all")
    row = {"unit": "us", "better": "lower", "spread": "", "bench": "envs"}
    first = [
        {**row, "row": "math step", "baseline_name": "GEM 1, same", "ours": 4.0, "baseline": 2.0, "ratio": 0.5},
        {**row, "row": "math step", "baseline_name": "skyrl 2, same", "ours": 4.0, "baseline": 1.0, "ratio": 0.25},
        {**row, "row": "search step", "baseline_name": "skyrl 2, same", "ours": 2.0, "baseline": 1.0, "ratio": 0.5},
        {**row, "bench": "sql", "row": "checks", "baseline_name": "x", "ours": 2.0, "baseline": 4.0, "ratio": 2.0},
    ]
    head = run_all.page_head()
    raw = ["## Raw output", "", "### envs", "", "old envs output", "", "### sql", "", "old sql output", ""]
    full = run_all.assemble(head, run_all.summary(first, []) + raw, first, "")
    rerun = [{**first[1], "baseline_name": "skyrl 2, new conditions", "ours": 2.0, "ratio": 0.5}]
    new_raw = ["## Raw output", "", "### envs (rerun with --kinds math)", "", "new math output", ""]
    page = run_all.assemble(
        head, run_all.summary(rerun, []) + new_raw, rerun, full, full, {"envs"}, "envs", frozenset({"envs"})
    )
    summary = page.split(run_all.CLOSING)[0]
    assert "| envs | math step | **0.50x** | 4 | 2 |" in summary  # vs GEM: not rerun, kept
    assert "| envs | math step | **0.50x** | 2 | 1 | us (lower is better) | skyrl 2, new conditions" in summary
    assert "**0.25x**" not in summary and "- envs / math step vs skyrl 2, same" not in summary  # replaced
    assert "- envs / math step vs skyrl 2, new conditions: 0.50x" in summary
    assert "- envs / math step vs GEM 1" in summary and "- envs / search step vs skyrl 2" in summary
    assert "| envs | search step | **0.50x** |" in summary and "| sql | checks | **2.00x** |" in summary
    assert "old envs output" in summary and "new math output" in summary and "old sql output" in summary
    note = page.split(run_all.CLOSING)[1]
    assert "| envs | search step | new row | 0.50x (2 / 1) | us |" in note  # as the full run wrote it
    assert "| envs | math step | 0.25x (4 / 1) | 0.50x (2 / 1) | us |" in note


def test_bench_async_runs_both_arms_on_the_trainers_rollout_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_async drives LocalRollouts and the Prefetcher as the trainer does; a signature drift in
    either broke `make bench` once (`policy=` after the source took `policies=`)."""
    monkeypatch.syspath_prepend(str(BENCH))
    bench = _load("bench_parse")  # the same import path run_all gives every bench (result_line beside it)
    assert bench.slope((0, 1000), [1.0, 3.0]) == pytest.approx(2.0)
    bench_async = _load("bench_async")
    monkeypatch.setattr(bench_async, "STEPS", 2)
    for staleness in (0, 2):
        assert bench_async.run(staleness, 7) > 2 * bench_async.LEARN_S  # two learner steps at least


def test_the_sql_goal_note_states_a_met_goal_a_miss_and_the_measured_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    sqlparse = _load("envs_sqlparse")
    assert sqlparse.goal_note(150.0, 479.0, 92.0, 86.0).startswith("goal 3x (#25) met")
    missed = sqlparse.goal_note(301.0, 479.0, 92.0, 86.0)
    assert "missed by 1.89x (needs 160 us)" in missed and "the step without it is 209 us (2.3x)" in missed
    assert "execution-match-only step (86 us) plus the one parse (92 us) is 178 us" in missed
    assert "library limit" not in sqlparse.goal_note(301.0, 479.0, 50.0, 86.0)  # 136 us: under the goal's 160
