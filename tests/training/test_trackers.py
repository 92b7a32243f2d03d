"""``--report-to``: every metrics row reaches trackio, W&B and MLflow, and a missing library is a
one-line error naming its extra. The trackers are stand-in modules written to a folder on
``PYTHONPATH`` of a real ``train-agent`` subprocess; each records the calls it gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from prm_gym.training.metrics import read_metrics
from prm_gym.training.trackers import mlflow_name

ROOT = Path(__file__).resolve().parents[2]
RECORD = "def _rec(*a, **k):\n    with open(os.environ['FAKE_TRACKER_LOG'], 'a') as fh:\n"
RECORD += "        fh.write(json.dumps([__name__, *a, k], default=str) + '\\n')\n"
FAKES = {
    "trackio": "def init(**k): _rec('init', **k)\ndef log(values, step): _rec('log', values, step=step)\n"
    "def finish(): _rec('finish')\n",
    "wandb": "class Run:\n    def log(self, values, step): _rec('log', values, step=step)\n"
    "    def finish(self): _rec('finish')\ndef init(**k):\n    _rec('init', **k)\n    return Run()\n",
    "mlflow": "def set_experiment(name): _rec('set_experiment', name)\n"
    "def start_run(run_name): _rec('start_run', run_name=run_name)\n"
    "def log_params(p): _rec('log_params', p)\ndef log_metrics(m, step): _rec('log', m, step=step)\n"
    "def end_run(): _rec('finish')\n",
}
ARGV = ["--env-kwargs", '{"levels": [1], "num_tasks": 20, "max_turns": 2}', "--steps", "1", "--group-size", "2"]
ARGV += ["--tasks-per-step", "1", "--sampling.max-new-tokens", "4", "--eval.num-tasks", "1", "--eval.samples", "1"]
ARGV += ["--no-progress", "--no-tensorboard"]


def _train(tmp_path: Path, extra: list[str], prelude: str = "") -> subprocess.CompletedProcess[str]:
    fakes = tmp_path / "fakes"
    fakes.mkdir(exist_ok=True)
    for name, body in FAKES.items():
        (fakes / f"{name}.py").write_text(f"import json, os\n{RECORD}{body}")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{fakes}", "HF_HUB_OFFLINE": "1"}
    env["FAKE_TRACKER_LOG"] = str(tmp_path / "calls.jsonl")
    code = f"{prelude}from prm_gym.training.cli import main; raise SystemExit(main({[*ARGV, *extra]!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)


def test_every_metrics_row_reaches_each_tracker(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _train(tmp_path, ["--output-dir", str(out), "--report-to", "trackio", "wandb", "mlflow"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    rows = read_metrics(out)
    for lib in ("trackio", "wandb", "mlflow"):
        mine = [c for c in calls if c[0] == lib]
        logged = [(c[-1]["step"], c[2]) for c in mine if c[1] == "log"]
        expect = [(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in rows]
        if lib == "mlflow":  # MLflow's names: pass@1 -> pass_at_1
            expect = [(s, {mlflow_name(k): v for k, v in values.items()}) for s, values in expect]
        assert logged == expect, lib
        assert mine[-1][1] == "finish", lib
    init = {c[0]: c[-1] for c in calls if c[1] == "init"}
    assert init["wandb"]["project"] == "prm-gym" and init["wandb"]["name"] == "run"
    assert init["trackio"]["config"]["steps"] == 1
    params = next(c[2] for c in calls if c[1] == "log_params")
    assert params["steps"] == "1" and params["eval.num_tasks"] == "1"


def test_a_missing_tracker_is_one_line_naming_its_extra(tmp_path: Path) -> None:
    proc = _train(tmp_path, ["--output-dir", str(tmp_path / "run"), "--report-to", "wandb"], "import sys\n"
                  "sys.modules['wandb'] = None\n")  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "train-agent: error: --report-to wandb: wandb is not installed; pip install 'prm-gym[wandb]'"
    ]


def test_mlflow_names() -> None:
    assert mlflow_name("pass@4/env=prm/Math-v0") == "pass_at_4/env_prm/Math-v0"
    assert mlflow_name("eval/reward_se") == "eval/reward_se"
