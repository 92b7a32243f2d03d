"""``make gpu-learn``: it stops at once with a clear message without a GPU, and (slow) its CPU dry run
with the tiny model runs both phases and records them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_learn", ROOT / "experiments" / "gpu_learn.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_fails_fast_and_says_what_to_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _module().main(["--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "torch.cuda.is_available() is False" in err and "--dry-run" in err
    assert not (tmp_path / "gpu_learn.json").exists()  # nothing started


def test_the_gpu_phases_sample_with_the_vllm_engine_and_larger_groups(tmp_path: Path) -> None:
    mod = _module()
    (learn, la), (step, sa), (compare, ca) = mod.phases(mod.parse_args(["--output-dir", str(tmp_path)]))
    assert (learn, step, compare) == ("learn", "step", "compare")
    assert sa[sa.index("--sampler") + 1] == "vllm-engine" and sa[sa.index("--sides") + 1] == "ours"
    assert sa[sa.index("--policy") + 1] == f"hf:{tmp_path / 'learn' / 'sft' / 'model'}"  # the study's SFT model
    assert la[la.index("--eval-tasks") + 1] == "500" and int(la[la.index("--group-size") + 1]) >= 16
    assert ca[ca.index("--sampler") + 1] == "vllm-engine" and ca[ca.index("--eval-tasks") + 1] == "500"
    assert ca[ca.index("--which") + 1] == "process" and int(ca[ca.index("--seeds") + 1]) >= 3


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not (ROOT / "experiments" / "learn.py").exists(), reason="experiments/learn.py not in this tree")
def test_dry_run_with_the_tiny_model_on_cpu(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "experiments" / "gpu_learn.py"), "--dry-run", "--output-dir", str(tmp_path)]
    assert subprocess.run(cmd, cwd=ROOT, check=False, timeout=1700).returncode == 0
    record = json.loads((tmp_path / "gpu_learn.json").read_text())
    assert {name: p["rc"] for name, p in record["phases"].items()} == {"learn": 0, "step": 0, "compare": 0}
    step = json.loads((tmp_path / "step.json").read_text())
    assert step["runs"]["ours"][0]["episodes_per_s"][0] > 0 and step["runs"]["ours"][0]["gen_s"][0] > 0
    assert (tmp_path / "learn" / "summary.json").exists()
    assert (tmp_path / "compare-search" / "process" / "summary.json").exists()
