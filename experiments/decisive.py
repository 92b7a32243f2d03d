"""``make decisive``: the decisive study of issue #44 (item 6), sized for one H200, run after ``make gpu-check``.

Two phases, each its seeds as parallel processes sharing the one GPU (``--jobs`` at once, default all;
``--threads`` torch threads each, default the cores shared out):

**a (math)**: ``experiments.learn`` on SmolLM2-135M with make gpu-learn's GPU sizes
(:data:`experiments.gpu_learn.LEARN_GPU`), seed ``k`` = 0..7 each with ``--seed k --heldout-seed seed`` (the
rotating split: 36 of 72 phrasings held out, drawn anew for every seed). learn runs all its arms: SFT
(at :data:`SFT_LR`), SFT continued (GRPO's control, at GRPO's learning rate: :data:`CONTROL_LR`), tuned RFT
(its ``--rft-lrs`` grid, the checkpoint chosen on validation) and GRPO; it has no flag to leave one out, so
the few-shot arm is evaluated too (about a fifth of the evaluation time; its results are in the tables, not
in the primary cell).
Its size is calibrated in the first minute and a half by make gpu-check's own mechanism
(:mod:`experiments.gpu_check`): every seed runs learn at the calibration size at once (so the timings carry
the sharing), stopped at its first evaluation; the slowest seed's phase times (:func:`combine`) size the
study's GRPO steps and held-out tasks (:func:`experiments.gpu_check.plan`) so that all seeds finish within
``--budget-s`` (480 s) of run time, calibration included. Then :mod:`experiments.learn_seeds` combines the
finished seeds into ``<out>/math/summary.{json,md}``: per seed the paired difference on each held-out cell
with its template-clustered 95% interval (t on templates - 1), and across seeds the 95% interval on seeds - 1
(the held-out templates differ by seed, so this interval also carries which phrasings were held out; no task
is in every run, so learn_seeds' pooled interval is left out). Phase a starts afresh each time (its
calibration and runs are removed).

**b (search)**: ``experiments.compare --task search --which process`` on prm/Search-v0 multi-hop
questions with SmolLM2-135M (make gpu-learn's sizes, :data:`experiments.gpu_learn.COMPARE_GPU`, with
``--search-steps`` steps), seed ``k`` = 0..7 each a process (``--seed k``), evaluated during training on
``--eval-unseen`` (150) test questions whose text no training question has; then the summary pass
(compare without ``--seed``, over the seeds whose every arm finished) into
``<out>/search/process/summary.json`` and ``<out>/search/summary.{json,md}``. Arms: outcome only,
retrieval credit, IGPO as its authors run it (``info-gain-authors``), chosen with compare's ``--arms``
(the project's own IGPO variant, ``info-gain``, does not run). Not calibrated: ``--search-budget-s``
(480 s) stops it, and a second call resumes (finished warm
starts and arms are reused; an arm cut short starts again).

Pre-registered primary cells (printed first, and first in each summary):

* a: GRPO minus SFT continued at GRPO's learning rate, strict success, greedy, held-out templates; 8 seeds;
  95% interval on t(7). (Amended 5 Dec 2026, before any run: the control was at SFT's rate; the one-seed
  CPU controls showed that rate moves the policy far more than GRPO's, docs/learning.md.)
* b: IGPO as its authors run it minus outcome only, final success on unseen questions; 8 seeds; t(7).

``<out>/decisive.json`` records the device and, for each phase, every process's command, exit status
and wall clock (with its log ``<out>/<name>.log``), the calibration and the plan. Without a CUDA device
(and without ``--dry-run``) it stops at once with exit status 2. ``--dry-run``: both phases with
``hf:tiny`` at toy sizes on the CPU, 2 seeds, 1 GRPO step (``tests/experiments/test_decisive.py``).
Exit status: 0 every process finished; 3 some were stopped by the budget; 1 one failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from experiments import HelpFormatter, learn_seeds  # noqa: E402
from experiments.gpu_check import CAL_GPU, REQUIRED, TIMEOUTS, calibration, plan, run_phase  # noqa: E402
from experiments.gpu_learn import (  # noqa: E402
    COMPARE,
    COMPARE_DRY,
    COMPARE_GPU,
    LEARN_DRY,
    LEARN_GPU,
    NEEDED,
    torch_sees_a_gpu,
)

SFT_LR = "1.5e-5"
"""SFT's learning rate in phase a (``--sft-lr``): the rate SFT's validation chose from RFT's grid (1.5e-5, 5e-5,
1.5e-4) in the CPU run of 5 Dec (seed 0: 72.9% against 60.4% at learn's default 5e-5; docs/learning.md, "SFT's
learning rate chosen on validation"). One rate, not the grid, so the study's time goes to GRPO and evaluation.
Amended before any run."""
CONTROL_LR = "3e-6"
"""SFT continued's learning rate in phase a (``--sft-continued-lr``): GRPO's (learn's ``--lr`` default), so
the control takes GRPO's updates at GRPO's step size."""
RFT_ROUNDS = 2
CONTROLS = ["--rft-rounds", str(RFT_ROUNDS), "--dynamic-sampling", "resample"]
"""Phase a's recipe for the controls of issue #44 item 3, as the CPU controls ran them: the tuned RFT with its
second round, and GRPO with DAPO's resampling (a step's groups without a signal are drawn again), so a start
that already solves most training tasks still trains on informative groups. Amended 5 Dec 2026, before any
run (learn's defaults are one RFT round and no resampling); the calibration runs with them, so its times
carry their cost."""
PRIMARY_SEEDS = 8
"""The seeds of each phase on the GPU, pre-registered with the primary cells (t(7))."""
PRIMARY_A = "grpo-vs-sft_cont-templates-greedy"
SECONDARY_A = ("grpo-vs-rft-templates-greedy",)
PRIMARY_B = ("IGPO as its authors run it", "outcome only")
SEARCH_ARMS = ("grpo", "retrieval", "info-gain-authors")
"""Phase b's runs (compare's ``--arms``): outcome only, retrieval credit, IGPO as its authors run it."""
CAL_DRY = ["--steps", "1", "--eval-tasks", "2", "--max-new-tokens", "8"]
"""The dry run's calibration size on top of :data:`experiments.gpu_learn.LEARN_DRY`: make gpu-check's."""
SUMMARY_S = 30
"""Seconds kept at the end of a phase for its summary."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--output-dir", default="runs/decisive")
    p.add_argument("--phases", default="a,b", help="a (math), b (search), or a,b")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..n-1 of each phase (8; dry run 2)")
    p.add_argument("--jobs", type=int, default=None, help="seed processes at once (default: every seed)")
    p.add_argument("--threads", type=int, default=None, help="torch threads a process (default: cores / jobs)")
    p.add_argument("--budget-s", type=float, default=None, help="phase a's run time, calibration included (480)")
    p.add_argument("--calibrate-s", type=float, default=None, help="phase a's calibration at most (100; dry run 600)")
    p.add_argument("--max-steps", type=int, default=None, help="phase a's GRPO steps at most (16; dry run 1)")
    p.add_argument("--search-budget-s", type=float, default=None, help="phase b's run time (480)")
    p.add_argument("--search-steps", type=int, default=None, help="phase b's GRPO steps an arm (10; dry run 1)")
    p.add_argument("--eval-unseen", type=int, default=None, help="phase b's unseen test questions (150; dry run 2)")
    p.add_argument("--policy", default="hf:smollm2-135m", help="the model of both phases on the GPU")
    p.add_argument("--sampler", choices=["hf", "vllm-engine"], default="hf", help="phase b's sampler")
    p.add_argument("--dry-run", action="store_true", help="both phases with hf:tiny at toy sizes on the CPU")
    args = p.parse_args(argv)
    gpu = {"seeds": PRIMARY_SEEDS, "budget_s": 480.0, "calibrate_s": float(TIMEOUTS["calibrate"]), "max_steps": 16}
    gpu |= {"search_budget_s": 480.0, "search_steps": 10, "eval_unseen": 150}
    dry = {"seeds": 2, "budget_s": 1800.0, "calibrate_s": 600.0, "max_steps": 1}
    dry |= {"search_budget_s": 1800.0, "search_steps": 1, "eval_unseen": 2}
    for key, value in (dry if args.dry_run else gpu).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.jobs = args.jobs or args.seeds
    if args.threads is None:
        args.threads = max(1, (os.cpu_count() or 1) // args.jobs)
    phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    if not phases or any(x not in ("a", "b") for x in phases):
        p.error(f"--phases: {args.phases!r}; give a, b or a,b")
    args.phases = phases
    if args.seeds < 2 or args.jobs < 1:
        p.error("--seeds must be at least 2 (an interval needs two) and --jobs at least 1")
    return args


def problem(dry_run: bool) -> str | None:
    """Why this machine cannot run the study (None when it can): no CUDA device, or a package missing."""
    if dry_run:
        return None
    if not torch_sees_a_gpu():
        return (
            "make decisive needs a CUDA GPU, and torch.cuda.is_available() is False on this machine "
            "(`python -m experiments.decisive --dry-run` runs both phases at toy size on the CPU)."
        )
    wanted = {**{m: m for m in REQUIRED}, **NEEDED}
    missing = [pip for module, pip in wanted.items() if importlib.util.find_spec(module) is None]
    if missing:
        return (
            f"make decisive: the studies import packages this Python lacks: pip install {' '.join(missing)} "
            "(no registry here: `make gpu-bundle GPU_BUNDLE_MODEL=1` where PyPI is reachable; docs/scale-out.md)"
        )
    return None


def device_name(dry_run: bool) -> str:
    """``cpu``, or ``cuda:0 (<name>)`` read in a child process (this one never makes a CUDA context)."""
    if dry_run:
        return "cpu"
    probe = [sys.executable, "-c", "import torch; print(torch.cuda.get_device_name(0))"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
        name = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else "?"
    except subprocess.TimeoutExpired:
        name = "?"
    return f"cuda:0 ({name})"


# ---------------------------------------------------------------- phase a: the math study


def without(argv: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``argv`` (``--flag value`` pairs) without the pairs of the flags that ``flags`` sets, so each flag is
    given once and the command reads as it runs."""
    names = {f for f in flags if f.startswith("--")}
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in names:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def learn_cmd(args: argparse.Namespace, seed: int, folder: Path, size: Sequence[str]) -> list[str]:
    """``experiments.learn`` for ``seed`` into ``folder``, at ``size`` (flags over make gpu-learn's), the
    held-out templates rotating with the seed."""
    device = "cpu" if args.dry_run else "cuda"
    sets = [*size] if args.dry_run else ["--policy", args.policy, "--threads", str(args.threads), *size]
    cmd = ["-m", "experiments.learn", "--device", device, "--output-dir", str(folder)]
    seeds = ["--seed", str(seed), "--heldout-seed", "seed", "--sft-lr", SFT_LR, "--sft-continued-lr", CONTROL_LR]
    seeds += CONTROLS
    return [*cmd, *without(LEARN_DRY if args.dry_run else LEARN_GPU, sets), *sets, *seeds]


def calibrate_commands(args: argparse.Namespace, out: Path) -> list[tuple[str, list[str]]]:
    """Every seed's calibration run (make gpu-check's size), into ``<out>/calibrate/seed<k>``."""
    size = CAL_DRY if args.dry_run else CAL_GPU
    return [(f"calibrate-seed{k}", learn_cmd(args, k, out / "calibrate" / f"seed{k}", size)) for k in range(args.seeds)]


def study_commands(args: argparse.Namespace, out: Path, steps: int, tasks: int) -> list[tuple[str, list[str]]]:
    """Every seed's study run, ``steps`` GRPO steps and ``tasks`` tasks a held-out set, into ``<out>/math/seed<k>``."""
    size = ["--steps", str(steps), "--eval-tasks", str(tasks)] + (["--max-new-tokens", "8"] if args.dry_run else [])
    return [(f"learn-seed{k}", learn_cmd(args, k, out / "math" / f"seed{k}", size)) for k in range(args.seeds)]


def combine(cals: Sequence[dict[str, float]]) -> dict[str, float]:
    """The seeds' calibrations as one: each phase's time is the slowest seed's (all seeds share the
    GPU and the budget ends when the last one does); a time no seed reached is left out."""
    keys = sorted({k for c in cals for k in c})
    return {k: max(c[k] for c in cals if k in c) for k in keys}


def plan_study(cals: Sequence[dict[str, float]], left_s: float, dry_run: bool, max_steps: int) -> dict[str, Any]:
    """The study's size from the seeds' calibrations: make gpu-check's :func:`experiments.gpu_check.plan`
    on :func:`combine`'s times, for ``left_s`` seconds, its GRPO steps capped at ``max_steps``."""
    study = plan(combine(cals), left_s, dry_run, rft_rounds=RFT_ROUNDS)
    if study["steps"] > max_steps:
        study |= {"steps": max_steps, "note": f"{study['note']}; steps capped at {max_steps}"}
    return study


def run_seeds(
    commands: Sequence[tuple[str, list[str]]], deadline: float, out: Path, jobs: int, stop_at: str = ""
) -> list[dict[str, Any]]:
    """Run every command (``jobs`` at once) with make gpu-check's :func:`experiments.gpu_check.run_phase`,
    each killed at ``deadline`` (a ``time.perf_counter()`` value); one not started with 5 s left is skipped."""

    def one(item: tuple[str, list[str]]) -> dict[str, Any]:
        name, argv = item
        left = deadline - time.perf_counter()
        if left < 5:
            return {"cmd": ["python", *argv], "rc": None, "skipped": "budget spent", "_lines": []}
        return {"name": name, **run_phase(name, argv, left, out, stop_at=stop_at)}

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, commands))


def _pts(x: float) -> str:
    return f"{x * 100:+.1f}"


def cell_line(label: str, c: dict[str, Any], wanted: int = PRIMARY_SEEDS) -> str:
    """One comparison across seeds: mean ± s.e. in points, its 95% interval on t(n - 1), p and the verdict."""
    lo, hi = ("-inf", "+inf") if math.isinf(c["lo"]) else (_pts(c["lo"]), _pts(c["hi"]))
    line = (
        f"{label}: {_pts(c['mean'])} ± {abs(c['se']) * 100:.1f} points over {c['n']} seeds, 95% interval "
        f"[{lo}, {hi}], t({c['df']}), p {c['p']:.2f}: {c['verdict']}"
    )
    return line + (f" (pre-registered {wanted} seeds, t({wanted - 1}): {c['n']} finished)" if c["n"] != wanted else "")


def summarize_math(folder: Path, runs: Sequence[Path]) -> dict[str, Any]:
    """learn_seeds over the finished seed runs into ``folder/summary.{json,md}``, the primary cell first."""
    names = [r.name for r in runs]
    try:
        result = learn_seeds.aggregate([learn_seeds.load_run(r) for r in runs])
    except ValueError as e:
        text = f"# Decisive study, phase a (math)\n\nNo summary: {e}\n"
        summary: dict[str, Any] = {"runs": names, "error": str(e)}
    else:
        cells = result["comparisons"]
        primary = cells.get(PRIMARY_A)
        head = (
            "Primary (pre-registered): GRPO − SFT continued at GRPO's learning rate, strict success, greedy, "
            "held-out templates"
        )
        lines = ["# Decisive study, phase a (math)", ""]
        lines.append(f"**{cell_line(head, primary)}**" if primary else f"**{head}: not measured (missing arms).**")
        if primary:
            lines += [
                "",
                "Within each seed (paired per task, template-clustered, 95% interval on t(templates − 1)):",
                "",
            ]
            for name, r in zip(names, primary["per_run"], strict=True):
                k = r["clustered"]
                tail = f"[{_pts(k['lo'])}, {_pts(k['hi'])}], t({k['df']}), {k['verdict']}" if k else "no clusters"
                lines.append(f"- {name}: {_pts(r['diff'])} points, {tail}")
        lines += ["", "Secondary:", ""]
        for key in SECONDARY_A:
            if key in cells:
                lines.append(f"- {cell_line('GRPO − tuned RFT, greedy, held-out templates', cells[key])}")
        lines += ["", "## Every arm and comparison (experiments.learn_seeds)", "", learn_seeds.render(result, names)]
        text = "\n".join(lines)
        summary = {
            "runs": names,
            "primary": {"cell": PRIMARY_A, "pre_registered_seeds": PRIMARY_SEEDS, **(primary or {})},
        }
        summary |= {"secondary": {k: cells.get(k) for k in SECONDARY_A}, "learn_seeds": result}
    return write_summary(folder, summary, text)


def write_summary(folder: Path, summary: dict[str, Any], text: str) -> dict[str, Any]:
    """``folder/summary.json`` and ``summary.md`` (``text``, also printed); returns ``summary``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (folder / "summary.md").write_text(text)
    print(text, flush=True)
    return summary


def phase_a(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Calibrate with every seed at once, size the study to the budget left, run it, combine the seeds."""
    start = time.perf_counter()
    for stale in ("calibrate", "math"):  # learn resumes from what it finds: the study starts afresh
        shutil.rmtree(out / stale, ignore_errors=True)
    rec: dict[str, Any] = {"budget_s": args.budget_s, "seeds": args.seeds, "jobs": args.jobs, "threads": args.threads}
    cal_deadline = start + min(args.calibrate_s, args.budget_s - 60)
    cal = run_seeds(calibrate_commands(args, out), cal_deadline, out, args.jobs, stop_at="eval ")
    per_seed = [calibration(r.pop("_lines"), out / "calibrate" / f"seed{k}") for k, r in enumerate(cal)]
    rec["calibrate"] = cal
    rec["calibration"], rec["per_seed_calibration"] = combine(per_seed), per_seed
    left = args.budget_s - (time.perf_counter() - start) - SUMMARY_S
    rec["plan"] = study = plan_study(per_seed, left, args.dry_run, args.max_steps)
    print(f"== decisive a: calibration {rec['calibration']}; plan {json.dumps(study)}", flush=True)
    runs = run_seeds(study_commands(args, out, study["steps"], study["eval_tasks"]), start + args.budget_s - 5,
                     out, args.jobs)  # fmt: skip
    for r in runs:
        r.pop("_lines")
    rec["study"] = runs
    finished = [
        out / "math" / f"seed{k}" for k in range(args.seeds) if (out / "math" / f"seed{k}" / "summary.json").exists()
    ]
    t0 = time.perf_counter()
    summary = summarize_math(out / "math", finished)
    cmd = ["python", "-m", "experiments.learn_seeds", *map(str, finished)]
    rec["summary"] = {
        "cmd": cmd,
        "rc": 0 if "error" not in summary else 1,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    rec["summary"]["left_out"] = [f"seed{k}" for k in range(args.seeds) if out / "math" / f"seed{k}" not in finished]
    rec["primary"] = {
        k: summary.get("primary", {}).get(k) for k in ("mean", "se", "n", "df", "lo", "hi", "p", "verdict")
    }
    rec["wall_s"] = round(time.perf_counter() - start, 1)
    return rec


# ---------------------------------------------------------------- phase b: the search comparison


def search_flags(args: argparse.Namespace, out: Path) -> list[str]:
    """Every seed's compare flags but ``--seed`` (the summary pass uses the same ones)."""
    device = "cpu" if args.dry_run else "cuda"
    sets = ["--steps", str(args.search_steps), "--eval-unseen", str(args.eval_unseen), "--seeds", str(args.seeds)]
    if args.dry_run:
        sets += ["--sampler", "hf"]
    else:
        sets += ["--eval-every", str(max(1, args.search_steps // 2)), "--policy", args.policy]
        sets += ["--sampler", args.sampler, "--threads", str(args.threads)]
    base = without(COMPARE_DRY if args.dry_run else COMPARE_GPU, sets)
    arms = ["--arms", ",".join(SEARCH_ARMS)]
    return [*COMPARE, "--output-dir", str(out / "search"), "--device", device, *base, *sets, *arms]


def search_commands(args: argparse.Namespace, out: Path) -> list[tuple[str, list[str]]]:
    """Every seed's compare process (``--seed k``: its warm start and arms, no summary)."""
    return [(f"search-seed{k}", [*search_flags(args, out), "--seed", str(k)]) for k in range(args.seeds)]


def finished_seeds(out: Path, seeds: int) -> int:
    """How many seeds 0, 1, ... in a row have every process arm finished (compare summarises seeds 0..n-1)."""
    names = SEARCH_ARMS
    n = 0
    while n < seeds and all((out / "search" / "runs" / f"seed{n}" / name / "done.json").exists() for name in names):
        n += 1
    return n


def summarize_search(folder: Path) -> dict[str, Any]:
    """The primary cell and each arm from compare's ``process/summary.json`` into ``folder/summary.{json,md}``."""
    path = folder / "process" / "summary.json"
    if not path.exists():
        text = f"# Decisive study, phase b (search)\n\nNo summary: {path} was not written.\n"
        summary: dict[str, Any] = {"error": f"{path} missing"}
    else:
        compare = json.loads(path.read_text())
        arms = compare["arms"]
        arm, first = PRIMARY_B
        head = f"Primary (pre-registered): {arm} − {first}, final success on unseen questions"
        primary = arms.get(arm, {}).get("minus_first_success") if next(iter(arms), None) == first else None
        lines = ["# Decisive study, phase b (search)", ""]
        lines.append(f"**{cell_line(head, primary)}**" if primary else f"**{head}: not measured.**")
        lines += ["", f"| arm | final success | minus {first} | 95% interval | verdict |", "|---|---|---|---|---|"]
        for name, a in arms.items():
            f, d = a["final_success"], a["minus_first_success"]
            ci = "" if name == first else f"[{_pts(d['lo'])}, {_pts(d['hi'])}], t({d['df']})"
            diff = "" if name == first else f"{_pts(d['mean'])} ± {d['se'] * 100:.1f}"
            said = "" if name == first else d["verdict"]
            lines.append(f"| {name} | {f['mean']:.1%} ± {f['se']:.1%} | {diff} | {ci} | {said} |")
        text = "\n".join(lines) + "\n"
        summary = {"primary": {"cell": f"{arm} - {first}", "pre_registered_seeds": PRIMARY_SEEDS, **(primary or {})}}
        summary["compare"] = compare
    return write_summary(folder, summary, text)


def phase_b(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Every seed's compare process at once, then the summary pass over the seeds that finished."""
    start = time.perf_counter()
    (out / "search").mkdir(parents=True, exist_ok=True)
    rec: dict[str, Any] = {"budget_s": args.search_budget_s, "seeds": args.seeds, "jobs": args.jobs}
    rec |= {"threads": args.threads, "sampler": "hf" if args.dry_run else args.sampler}
    runs = run_seeds(search_commands(args, out), start + args.search_budget_s - SUMMARY_S, out, args.jobs)
    for r in runs:
        r.pop("_lines")
    rec["runs"] = runs
    n = finished_seeds(out, args.seeds)
    flags = search_flags(args, out)
    flags[flags.index("--seeds") + 1] = str(n)
    if n >= 2:
        left = start + args.search_budget_s - time.perf_counter()
        done = run_phase("search-summary", flags, max(left, SUMMARY_S), out)
        done.pop("_lines")
        rec["summary"] = {"name": "search-summary", **done, "seeds": n}
    else:
        rec["summary"] = {"cmd": ["python", *flags], "rc": None, "skipped": f"{n} seeds finished (2 needed)"}
    summary = summarize_search(out / "search")
    rec["primary"] = {
        k: summary.get("primary", {}).get(k) for k in ("mean", "se", "n", "df", "lo", "hi", "p", "verdict")
    }
    rec["wall_s"] = round(time.perf_counter() - start, 1)
    return rec


def status(phases: dict[str, Any]) -> int:
    """0: every process finished; 3: some were stopped or skipped by the budget; 1: one failed."""
    rcs = [
        r.get("rc") for p in phases.values() for r in [*p.get("study", []), *p.get("runs", []), p.get("summary", {})]
    ]
    # a calibration stopped at its first evaluation exits 0; one cut by its timeout left the plan a quarter size
    rcs += [r["rc"] for p in phases.values() for r in p.get("calibrate", []) if r.get("rc") not in (124, None)]
    if all(rc == 0 for rc in rcs):
        return 0
    return 3 if all(rc in (0, 124, None) for rc in rcs) else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if why := problem(args.dry_run):
        print(why, file=sys.stderr)
        return 2
    start = time.perf_counter()
    out = Path(args.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not args.dry_run:
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # 8 processes on one GPU
        if args.sampler == "vllm-engine":  # each seed's engine gets its share of the GPU's memory
            engine = {"gpu_memory_utilization": round(0.4 / args.jobs, 3), "enforce_eager": True, "dtype": "bfloat16"}
            os.environ.setdefault("PRM_VLLM_ENGINE_ARGS", json.dumps(engine))
    device = device_name(args.dry_run)
    print(f"decisive: {device}, phases {','.join(args.phases)}, {args.seeds} seeds, {args.jobs} at once, "
          f"{args.threads} threads each{' (dry run, hf:tiny)' if args.dry_run else ''}", flush=True)  # fmt: skip
    record: dict[str, Any] = {
        "dry_run": args.dry_run,
        "device": device,
        "policy": "hf:tiny" if args.dry_run else args.policy,
    }
    record["phases"] = {}
    for phase, run in (("a", phase_a), ("b", phase_b)):
        if phase in args.phases:
            record["phases"][phase] = {"device": device, **run(args, out)}
            record["wall_s"] = round(time.perf_counter() - start, 1)
            (out / "decisive.json").write_text(json.dumps(record, indent=2, default=str))
    for phase, p in record["phases"].items():
        c = p.get("primary") or {}
        a = "GRPO − SFT continued at GRPO's lr (templates, greedy)"
        what = {"a": a, "b": " − ".join(PRIMARY_B) + " (unseen)"}[phase]
        said = cell_line(what, c) if c.get("mean") is not None else f"{what}: not measured"
        print(f"decisive {phase}: {said}", flush=True)
    return status(record["phases"])


if __name__ == "__main__":
    sys.exit(main())
