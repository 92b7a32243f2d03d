"""``make gpu-learn``: it stops at once with a clear message without a GPU, samples with vLLM's engine
when vLLM imports and with the HF sampler when not (saying which in one line), passes ``--device``
to every phase, and (slow) its CPU dry run with the tiny model runs the phases and records them."""

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


@pytest.mark.parametrize("sampler", ["vllm-engine", "hf"])
def test_the_gpu_phases_use_the_sampler_the_device_and_larger_groups(tmp_path: Path, sampler: str) -> None:
    mod = _module()
    args = mod.parse_args(["--output-dir", str(tmp_path)])
    (learn, la), (step, sa), (compare, ca) = mod.phases(args, sampler)
    assert (learn, step, compare) == ("learn", "step", "compare")
    assert sa[sa.index("--sampler") + 1] == sampler and sa[sa.index("--sides") + 1] == "ours"
    assert sa[sa.index("--policy") + 1] == f"hf:{tmp_path / 'learn' / 'sft' / 'model'}"  # the study's SFT model
    assert la[la.index("--eval-tasks") + 1] == "500" and int(la[la.index("--group-size") + 1]) >= 16
    assert ca[ca.index("--sampler") + 1] == sampler and ca[ca.index("--eval-tasks") + 1] == "500"
    assert ca[ca.index("--which") + 1] == "process" and int(ca[ca.index("--seeds") + 1]) >= 3
    assert la[la.index("--device") + 1] == ca[ca.index("--device") + 1] == args.device  # every phase of the study
    assert args.device == ("cuda:0" if torch.cuda.is_available() else "auto")  # without a GPU main stops first


def test_the_dry_run_runs_on_the_cpu_with_the_hf_sampler_unless_told(tmp_path: Path) -> None:
    mod = _module()
    args = mod.parse_args(["--dry-run", "--output-dir", str(tmp_path)])
    assert args.device == "cpu" and mod.sampler(True) == ("hf", "dry run")
    for _, argv in mod.phases(args, "hf"):
        assert "vllm-engine" not in argv and argv[argv.index("--policy") + 1] == "hf:tiny"
    assert all(argv[argv.index("--device") + 1] == "cpu" for name, argv in mod.phases(args, "hf") if name != "step")
    assert mod.parse_args(["--dry-run", "--device", "auto"]).device == (
        "cuda:0" if torch.cuda.is_available() else "cpu"
    )


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_it_samples_with_hf_and_says_so_in_one_line() -> None:
    import transformers

    mod = _module()
    assert mod.sampler(False) == ("hf", "vLLM not installed")
    line = mod.describe("cpu", "hf", "vLLM not installed")
    assert line == (
        f"gpu_learn: cpu, sampler hf (vLLM not installed), torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    assert "\n" not in line


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not (ROOT / "experiments" / "learn.py").exists(), reason="experiments/learn.py not in this tree")
def test_dry_run_with_the_tiny_model_on_cpu(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "experiments.gpu_learn", "--dry-run", "--output-dir", str(tmp_path)]
    run = subprocess.run(cmd, cwd=ROOT, check=False, timeout=1700, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.splitlines()[0].startswith("gpu_learn: cpu, sampler hf (dry run), torch ")
    record = json.loads((tmp_path / "gpu_learn.json").read_text())
    assert {name: p["rc"] for name, p in record["phases"].items()} == {"learn": 0, "step": 0, "compare": 0}
    assert record["device"] == "cpu" and record["sampler"] == "hf"
    step = json.loads((tmp_path / "step.json").read_text())
    assert step["runs"]["ours"][0]["episodes_per_s"][0] > 0 and step["runs"]["ours"][0]["gen_s"][0] > 0
    learn = json.loads((tmp_path / "learn" / "summary.json").read_text())
    assert learn["device"] == "cpu" and {learn["phases"][p]["device"] for p in ("sft", "rft", "grpo")} == {"cpu"}
    compare = json.loads((tmp_path / "compare-search" / "process" / "summary.json").read_text())
    assert compare["device"] == "cpu"
