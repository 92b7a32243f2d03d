"""``make decisive``: it stops at once without a GPU; its command lines run 8 seeds as parallel processes
(held-out templates rotating with the seed); the math study is sized from the slowest seed's
calibration to the budget; the summaries put the pre-registered primary cell first; and (slow) its
CPU dry run runs both phases end to end with 2 seeds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from experiments import decisive
from experiments import learn as learn_study

ROOT = Path(__file__).resolve().parents[2]
CAL = {"sft_s": 20.0, "rft_s": 8.0, "grpo_s": 9.0, "eval_s": 4.0, "rollout_s": 3.0, "learn_s": 1.0}


def _value(argv: list[str], flag: str) -> str:
    assert Counter(argv)[flag] == 1, f"{flag} given {Counter(argv)[flag]} times in {argv}"
    return argv[argv.index(flag) + 1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_stops_at_once_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert decisive.main(["--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "torch.cuda.is_available() is False" in err and "--dry-run" in err
    assert not (tmp_path / "out").exists()  # nothing started


def test_eight_seeds_run_as_parallel_processes_with_rotating_held_out_templates(tmp_path: Path) -> None:
    args = decisive.parse_args(["--output-dir", str(tmp_path)])
    assert (args.seeds, args.jobs, args.budget_s, args.phases) == (8, 8, 480.0, ["a", "b"])
    cal = decisive.calibrate_commands(args, tmp_path)
    study = decisive.study_commands(args, tmp_path, 5, 120)
    search = decisive.search_commands(args, tmp_path)
    for commands, module in ((cal, "experiments.learn"), (study, "experiments.learn"), (search, "experiments.compare")):
        assert len(commands) == 8 and len({name for name, _ in commands}) == 8
        for k, (_, argv) in enumerate(commands):
            assert argv[:2] == ["-m", module] and _value(argv, "--seed") == str(k)
            assert _value(argv, "--device") == "cuda" and _value(argv, "--policy") == "hf:smollm2-135m"
            assert _value(argv, "--threads") == str(args.threads)
        assert len({_value(argv, "--output-dir") for _, argv in commands}) == (1 if commands is search else 8)
    for _, argv in search:
        assert _value(argv, "--arms") == "grpo,retrieval,info-gain-authors"  # not the project's info-gain variant
    grpo_lr = learn_study.parse_args([]).lr
    for _, argv in cal + study:
        assert _value(argv, "--heldout-seed") == "seed" and _value(argv, "--group-size") == "16"
        assert float(_value(argv, "--sft-continued-lr")) == grpo_lr  # the control at GRPO's step size
        assert _value(argv, "--sft-lr") == decisive.SFT_LR == "1.5e-5"  # the rate validation chose on the CPU
        assert _value(argv, "--rft-rounds") == "2" and _value(argv, "--dynamic-sampling") == "resample"
    assert _value(cal[0][1], "--eval-tasks") == "16" and _value(cal[0][1], "--steps") == "1"  # make gpu-check's size
    assert _value(study[3][1], "--steps") == "5" and _value(study[3][1], "--eval-tasks") == "120"
    assert _value(study[3][1], "--output-dir") == str(tmp_path / "math" / "seed3")
    s = search[7][1]
    assert _value(s, "--task") == "search" and _value(s, "--which") == "process" and _value(s, "--seeds") == "8"
    assert _value(s, "--eval-unseen") == "150" and _value(s, "--sampler") == "hf"
    assert _value(s, "--output-dir") == str(tmp_path / "search")
    dry = decisive.parse_args(["--dry-run", "--output-dir", str(tmp_path)])
    assert (dry.seeds, dry.max_steps, dry.search_steps) == (2, 1, 1)
    for _, argv in decisive.calibrate_commands(dry, tmp_path) + decisive.search_commands(dry, tmp_path):
        assert _value(argv, "--device") == "cpu" and _value(argv, "--policy") == "hf:tiny"


def test_phases_and_seeds_are_checked() -> None:
    assert decisive.parse_args(["--phases", "b"]).phases == ["b"]
    for bad in (["--phases", "c"], ["--seeds", "1"]):
        with pytest.raises(SystemExit):
            decisive.parse_args(bad)


def test_the_slowest_seed_sizes_the_study_to_the_budget_left() -> None:
    slow = {**CAL, "eval_s": 9.0}
    assert decisive.combine([CAL, slow, {"sft_s": 30.0}]) == {**slow, "sft_s": 30.0}
    full = decisive.plan_study([CAL, CAL], 10_000.0, dry_run=False, max_steps=16)
    assert (full["steps"], full["eval_tasks"]) == (16, 500) and full["note"] == "fits"
    tight = decisive.plan_study([CAL, slow], 600.0, dry_run=False, max_steps=16)
    alone = decisive.plan_study([CAL, CAL], 600.0, dry_run=False, max_steps=16)
    assert tight["estimate_s"] <= 0.9 * 600 and tight["eval_tasks"] < alone["eval_tasks"] < 500
    assert tight["steps"] < alone["steps"] < 16
    blind = decisive.plan_study([{"sft_s": 1.0}, {}], 380.0, dry_run=False, max_steps=16)
    assert (blind["steps"], blind["eval_tasks"]) == (4, 125) and blind["estimate_s"] is None  # a quarter
    dry = decisive.plan_study([{k: 0.1 for k in CAL}] * 2, 600.0, dry_run=True, max_steps=1)
    assert dry["steps"] == 1 and "capped at 1" in dry["note"]


def test_seeds_run_at_once_stop_at_their_first_evaluation_and_skip_past_the_deadline(tmp_path: Path) -> None:
    wait = ["-c", "import time; print('eval 1', flush=True); time.sleep(60)"]
    t0 = time.perf_counter()
    recs = decisive.run_seeds([("s0", wait), ("s1", wait)], t0 + 50, tmp_path, jobs=2, stop_at="eval ")
    assert [r["rc"] for r in recs] == [0, 0] and all("stopped" in r for r in recs)
    assert time.perf_counter() - t0 < 40 and (tmp_path / "s1.log").read_text().startswith("eval 1")
    late = decisive.run_seeds([("s2", wait)], time.perf_counter() + 1, tmp_path, jobs=1)
    assert late[0]["rc"] is None and late[0]["skipped"] == "budget spent"


def _evals(run: Path, seed: int, arms: dict[str, list[bool]]) -> Path:
    """A learn run's held-out template records: each seed holds out other templates (rotating split)."""
    (run / "evals").mkdir(parents=True)
    for arm, wins in arms.items():
        rows = [{"task_id": f"t{i}", "template": f"s{seed}h{i % 3}", "strict": w} for i, w in enumerate(wins)]
        (run / "evals" / f"{arm}-templates-greedy.json").write_text(json.dumps(rows))
    (run / "summary.json").write_text("{}")
    return run


def test_the_math_summary_puts_the_pre_registered_primary_cell_first(tmp_path: Path) -> None:
    yes, no = True, False
    runs = [
        _evals(tmp_path / "seed0", 0, {"sft_cont": [yes, no] * 3, "rft": [yes] * 6, "grpo": [yes] * 6}),
        _evals(tmp_path / "seed1", 1, {"sft_cont": [no] * 6, "rft": [yes, no] * 3, "grpo": [yes, yes, no] * 2}),
    ]
    summary = decisive.summarize_math(tmp_path, runs)
    md = (tmp_path / "summary.md").read_text()
    first = md.split("\n\n")[1]
    assert first.startswith(
        "**Primary (pre-registered): GRPO − SFT continued at GRPO's learning rate, strict success, greedy, "
        "held-out templates"
    )
    assert "+58.3 ± 8.3 points over 2 seeds" in first and "t(1)" in first
    assert "(pre-registered 8 seeds, t(7): 2 finished)" in first
    assert "GRPO − tuned RFT" in md and "seed1: +66.7 points" in md
    primary = json.loads((tmp_path / "summary.json").read_text())["primary"]
    assert primary["cell"] == "grpo-vs-sft_cont-templates-greedy" and primary["df"] == 1
    assert primary["pooled_clustered"] is None and primary["verdict"] == primary["seeds_verdict"]  # no shared task
    assert summary["primary"]["n"] == 2


def test_the_search_summary_reads_igpo_as_its_authors_run_it_against_outcome_only(tmp_path: Path) -> None:
    def arm(final: float, diff: float) -> dict[str, object]:
        d = {"mean": diff, "se": 0.02, "n": 8, "df": 7, "lo": diff - 0.05, "hi": diff + 0.05, "p": 0.3}
        return {"final_success": {"mean": final, "se": 0.01, "n": 8}, "minus_first_success": {**d, "verdict": "gain"}}

    arms = {
        "outcome only": arm(0.4, 0.0),
        "retrieval credit": arm(0.42, 0.02),
        "IGPO as its authors run it": arm(0.5, 0.1),
    }
    (tmp_path / "process").mkdir()
    (tmp_path / "process" / "summary.json").write_text(json.dumps({"which": "process", "arms": arms}))
    decisive.summarize_search(tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert md.split("\n\n")[1].startswith(
        "**Primary (pre-registered): IGPO as its authors run it − outcome only, final success on unseen questions: "
        "+10.0 ± 2.0 points over 8 seeds, 95% interval [+5.0, +15.0], t(7), p 0.30: gain**"
    )
    assert json.loads((tmp_path / "summary.json").read_text())["primary"]["df"] == 7


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_dry_run_both_phases_with_the_tiny_model_on_cpu(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "experiments.decisive", "--dry-run", "--output-dir", str(tmp_path)]
    run = subprocess.run(cmd, cwd=ROOT, check=False, timeout=3500, capture_output=True, text=True)
    print(run.stdout[-6000:])
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert run.stdout.startswith("decisive: cpu, phases a,b, 2 seeds, 2 at once")
    record = json.loads((tmp_path / "decisive.json").read_text())
    a, b = record["phases"]["a"], record["phases"]["b"]
    assert record["device"] == a["device"] == b["device"] == "cpu"
    assert [r["rc"] for r in a["calibrate"]] == [0, 0] and all("stopped" in r for r in a["calibrate"])
    assert a["plan"]["steps"] == 1 and [r["rc"] for r in a["study"]] == [0, 0]
    assert all(r["wall_s"] > 0 and r["cmd"][:3] == ["python", "-m", "experiments.learn"] for r in a["study"])
    assert a["summary"]["rc"] == 0 and a["primary"]["df"] == 1
    assert [r["rc"] for r in b["runs"]] == [0, 0] and b["summary"]["rc"] == 0 and b["primary"]["df"] == 1
    math_md = (tmp_path / "math" / "summary.md").read_text()
    assert "**Primary (pre-registered): GRPO − SFT continued" in math_md
    search = json.loads((tmp_path / "search" / "process" / "summary.json").read_text())
    assert next(iter(search["arms"])) == "outcome only" and "IGPO as its authors run it" in search["arms"]
    assert (
        "**Primary (pre-registered): IGPO as its authors run it − outcome only"
        in (tmp_path / "search" / "summary.md").read_text()
    )
