"""``make gpu-check``: it stops at once without a GPU, its phases are the GPU-scale commands, the study
shrinks to fit the budget left, and (slow) its CPU dry run writes every phase with a wall clock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments import gpu_check

ROOT = Path(__file__).resolve().parents[2]
CAL = {"sft_s": 20.0, "rft_s": 8.0, "grpo_s": 9.0, "eval_s": 4.0, "rollout_s": 3.0, "learn_s": 1.0}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_fails_fast_and_says_what_to_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_check.main(["--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "--dry-run" in err
    assert not (tmp_path / "gpu_check.json").exists()  # nothing started


def test_the_gpu_phases_run_the_gpu_tests_benchmarks_and_calibration_on_cuda(tmp_path: Path) -> None:
    args = gpu_check.parse_args(["--output-dir", str(tmp_path)])
    phases = dict(gpu_check.fixed_phases(args, "hf:smollm2-135m", tmp_path))
    assert list(phases) == ["calibrate", "tests", "sampler", "episodes", "learner"]
    cal = phases["calibrate"]
    assert cal[:2] == ["-m", "experiments.learn"] and cal[cal.index("--device") + 1] == "cuda"
    assert cal[len(cal) - 1 - cal[::-1].index("--eval-tasks") + 1] == "16"  # the last --eval-tasks wins
    assert cal[cal.index("--group-size") + 1] == "16"  # the study's own groups, so a step costs what it will
    assert (
        "tests/training/test_gpu.py" in phases["tests"] and phases["tests"][phases["tests"].index("-m", 1) + 1] == "gpu"
    )
    sampler = phases["sampler"]
    assert sampler[sampler.index("--batch") + 1] == "64,256" and sampler[sampler.index("--device") + 1] == "cuda"
    assert "--episodes" in phases["episodes"] and "precision" in phases["learner"]


def test_the_study_shrinks_to_fit_what_the_budget_has_left() -> None:
    full = gpu_check.plan(CAL, 10_000.0, dry_run=False)
    assert (full["steps"], full["eval_tasks"]) == (16, 500) and full["note"] == "fits"
    tight = gpu_check.plan(CAL, 400.0, dry_run=False)
    assert 1 < tight["steps"] < 16 and 50 < tight["eval_tasks"] < 500 and tight["estimate_s"] <= 0.9 * 400
    floor = gpu_check.plan(CAL, 10.0, dry_run=False)
    assert (floor["steps"], floor["eval_tasks"]) == (1, 50) and "may not fit" in floor["note"]
    blind = gpu_check.plan({"sft_s": 1.0}, 400.0, dry_run=False)
    assert (blind["steps"], blind["eval_tasks"]) == (4, 125) and blind["estimate_s"] is None
    # RFT's second round (make decisive's recipe) plays GRPO's episodes again: steps x rollout more, less the
    # one step of them the calibration's rft_s already holds
    one, two = (gpu_check.estimate(CAL, 16, 500, 0.5, 16, rft_rounds=r) for r in (1, 2))
    assert two - one == 15 * CAL["rollout_s"] + 12
    assert gpu_check.plan(CAL, 400.0, dry_run=False, rft_rounds=2)["steps"] <= tight["steps"]


def test_the_calibration_is_read_off_the_times_of_its_output_lines(tmp_path: Path) -> None:
    lines = [(1.0, "SFT step 1: ..."), (12.0, "sft: done in 0.2 min"), (20.0, "RFT: 128 episodes")]
    lines += [(21.0, "rft: done in 0.1 min"), (30.5, "grpo: done in 0.2 min"), (35.0, "eval sft numbers ...")]
    run = tmp_path / "grpo" / "run"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(
        json.dumps({"step": 0}) + "\n" + json.dumps({"step": 1, "rollout_s": 2.5, "learn_s": 0.5})
    )
    cal = gpu_check.calibration(lines, tmp_path)
    assert cal == {"sft_s": 12.0, "rft_s": 9.0, "grpo_s": 9.5, "eval_s": 4.5, "rollout_s": 2.5, "learn_s": 0.5}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dry_run_on_the_cpu_records_every_phase(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "experiments.gpu_check", "--dry-run", "--output-dir", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, check=False, timeout=540, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    names = ["calibrate", "tests", "sampler", "episodes", "learner", "learn"]
    assert list(record["phases"]) == names
    assert all(p["rc"] == 0 and p["wall_s"] > 0 and "busy" in p for p in record["phases"].values())
    assert record["phases"]["calibrate"]["stopped"] and {"sft_s", "grpo_s", "eval_s"} <= set(record["calibration"])
    assert record["plan"]["steps"] >= 1 and record["wall_s"] < record["budget_s"]
    assert {r["bench"] for r in record["results"]} == {"sampler", "learner"}
    page = (tmp_path / "gpu_check.md").read_text()
    for name in names:
        assert f"| {name} | 0" in page
    assert (tmp_path / "learn" / "summary.json").exists()
