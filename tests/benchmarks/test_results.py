"""The RESULT-line convention, the run_all summary table, and bench_envs' peer handling."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SKYRL_PYTHON = Path("/tmp/skyrl-venv/bin/python")
ENVS_CMD = [sys.executable, str(BENCH / "bench_envs.py"), "--reps", "1"]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}_under_test", BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
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
    assert all(r["ratio"] is None and "not found" in str(r["skipped"]) for r in records)
    assert "prm/SQL-v0: 6 episodes per pass" in proc.stdout


@pytest.mark.skipif(not SKYRL_PYTHON.exists(), reason="skyrl-gym venv not at /tmp/skyrl-venv (see bench_envs.py)")
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
    timings = [r for r in records if r["unit"] == "us"]
    assert len(timings) == 9 and all(float(str(r["ours"])) > 0 and float(str(r["baseline"])) > 0 for r in timings)
