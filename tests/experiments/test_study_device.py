"""``--device`` in every study (:mod:`experiments.study_device`): a GPU asked for on a machine without
one stops the study at once with the reason (exit 2, no traceback); the learn study at toy size runs
SFT, RFT, GRPO and every evaluation on the device it was given, records it, and names a device at
every tensor factory its own code calls."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from experiments import compare, demo, gpu_learn, learn, reeval
from experiments.learn_records import MODELS
from prm_gym.core.device_guard import device_guard

ROOT = Path(__file__).resolve().parents[2]
NO_GPU = "device: 'cuda' was asked for but torch sees no GPU; use --device cpu or auto."
needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


@needs_no_gpu
@pytest.mark.parametrize("study", ["learn", "compare"])
def test_a_gpu_asked_for_without_one_stops_the_study_with_the_reason(study: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", f"experiments.{study}", "--device", "cuda", "--output-dir", str(out)]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 2, run.stderr
    assert NO_GPU in run.stderr and "Traceback" not in run.stderr
    assert not out.exists()  # no phase started


PARSERS: dict[str, Callable[[list[str]], Any]] = {
    "learn": learn.parse_args,
    "compare": compare.parse_args,
    "demo": demo.parse_args,
    "reeval": lambda flags: reeval.main(["--eval-unseen", "2", *flags]),
    "gpu_learn --dry-run": lambda flags: gpu_learn.parse_args(["--dry-run", *flags]),
}


@needs_no_gpu
@pytest.mark.parametrize("study", list(PARSERS))
def test_every_study_refuses_a_gpu_it_does_not_have(study: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        PARSERS[study](["--device", "cuda"])
    assert stop.value.code == 2 and NO_GPU in capsys.readouterr().err


@pytest.mark.parametrize("study", ["learn", "compare", "demo"])
def test_device_names_resolve_once_and_bad_ones_are_refused(study: str, capsys: pytest.CaptureFixture[str]) -> None:
    parse = PARSERS[study]
    assert parse(["--device", "cpu"]).device == "cpu"
    assert parse([]).device == ("cuda:0" if torch.cuda.is_available() else "cpu")  # auto
    with pytest.raises(SystemExit) as stop:
        parse(["--device", "gpu"])
    assert stop.value.code == 2 and "'gpu' is not a device; use auto, cpu, cuda or cuda:N" in capsys.readouterr().err


def test_the_grpo_runs_of_the_studies_train_on_the_device(tmp_path: Path) -> None:
    args = learn.parse_args(["--device", "cpu", "--output-dir", str(tmp_path)])
    assert learn.grpo_config(tmp_path, args).device == "cpu"
    args = demo.parse_args(["--device", "cpu"])
    assert demo.learn_config(tmp_path, tmp_path, args).device == "cpu"
    for task in ("math", "search"):
        args = compare.parse_args(["--task", task, "--device", "cpu", "--output-dir", str(tmp_path)])
        base = compare.base_config(args, tmp_path, 0)
        assert {
            compare.arm_config(name, base, args).device
            for arm in compare.comparisons(args).values()
            for name in arm.values()
        } == {"cpu"}


def test_a_finished_compare_run_from_before_the_flag_is_reused_where_auto_resolves() -> None:
    here = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert compare.same_run({"device": "auto", "lr": 1.0}, {"device": here, "lr": 1.0})
    assert not compare.same_run({"device": "auto", "lr": 1.0}, {"device": "cuda:1", "lr": 1.0})
    assert not compare.same_run({"device": "cpu", "lr": 1.0}, {"device": "cpu", "lr": 2.0})


@pytest.mark.timeout(900)  # five arms at toy size: 7.0 min measured on 2 cores at load 6
def test_every_phase_of_the_learn_study_runs_on_the_device_and_records_it(tmp_path: Path) -> None:
    """The toy learn study of ``gpu_learn --dry-run`` with ``--device cpu``: each phase records where
    its model was, and the study's own code names a device at every tensor factory (the guard
    raises otherwise)."""
    threads = torch.get_num_threads()
    flags = [*gpu_learn.LEARN_DRY, "--no-map-large-allocations", "--device", "cpu", "--output-dir", str(tmp_path)]
    try:
        with device_guard(roots=(ROOT / "experiments",)):
            summary = learn.main(flags)
    finally:
        torch.set_num_threads(threads)
    phases = summary["phases"]
    assert summary["device"] == "cpu"
    assert {name: phases[name]["device"] for name in ("sft", "sft_cont", "rft", "grpo")} == dict.fromkeys(
        ("sft", "sft_cont", "rft", "grpo"), "cpu"
    )
    assert phases["eval"]["devices"] == dict.fromkeys(MODELS, "cpu")
    assert json.loads((tmp_path / "summary.json").read_text())["phases"] == phases
    # the controls of issue 44 (item 3) at toy size: SFT continued for GRPO's updates, paired against GRPO;
    # RFT's grid; GRPO's groups with a signal counted per step
    assert (
        phases["sft_cont"]["steps"] == phases["grpo"]["steps"]
        and (tmp_path / "evals" / "sft_cont-templates-greedy.json").exists()
    )
    assert {f"grpo-vs-sft_cont-{s}-{m}" for s in ("numbers", "templates") for m in ("greedy", "sampled")} <= set(
        summary["paired"]
    )
    assert phases["grpo"]["informative_groups"]["trained_per_step"] == [1] * phases["grpo"]["steps"]
    assert "successes" in phases["rft"] and "rounds" in phases["rft"]
    assert "GRPO's groups with a signal" in (tmp_path / "summary.md").read_text()
    assert json.loads((tmp_path / "phases.json").read_text()) == phases  # the record survives a resumed call


@pytest.mark.gpu
def test_every_phase_of_the_learn_study_runs_on_the_gpu(tmp_path: Path, gpu_device: str) -> None:
    """On a GPU the same toy study must record ``cuda:0`` for every phase: a model left where
    ``load_hf`` put it (the CPU) shows up here."""
    flags = [*gpu_learn.LEARN_DRY, "--no-map-large-allocations", "--device", gpu_device, "--output-dir", str(tmp_path)]
    summary = learn.main(flags)
    phases = summary["phases"]
    where = "cuda:0" if gpu_device == "cuda" else "cpu"
    assert summary["device"] == where
    assert [phases[name]["device"] for name in ("sft", "rft", "grpo")] == [where] * 3
    assert phases["eval"]["devices"] == dict.fromkeys(MODELS, where)
