"""Peak resident memory of ``make learn``, phase by phase, against the 4 GB goal (issue #34, item 3).

    .venv/bin/python benchmarks/bench_learn_memory.py            # make learn's shapes, few steps
    .venv/bin/python benchmarks/bench_learn_memory.py --full     # the whole make learn (over an hour)

Runs ``experiments/learn.py`` (SmolLM2-135M as shipped, bf16 sampling and autocast, SFT batch 8,
GRPO 4 tasks x 8 samples in micro-batches of 8, held-out evaluation in chunks of 50 episodes: the
shapes of ``make learn``) into a fresh folder, with fewer steps unless ``--full``: memory follows
the shapes, not the number of steps. The resident memory of the process (and any children) is
read from ``/proc`` every 0.25 s; each phase's peak is the largest reading between the lines the
study prints when it starts and ends a phase. ``--extra`` passes more flags to the study (e.g.
``--no-activation-checkpointing`` to see the learners without recomputation).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHORT = ["--sft-steps", "2", "--sft-every", "2", "--steps", "3", "--rft-max-steps", "2", "--eval-tasks", "50"]
GOAL_MIB = 4096.0


def tree_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its direct children, in MiB (0 for processes that are gone)."""
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    total = 0
    for p in pids:
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1])
        except OSError:
            continue
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def phase_of(line: str, current: str) -> str:
    """The phase a line of the study's output starts (``current`` when it starts none)."""
    if line.startswith("sft: done"):
        return "rft"
    if line.startswith("rft: done"):
        return "grpo"
    if line.startswith("grpo: done"):
        return "evaluations"
    return current


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the whole make learn, not make learn's shapes with few steps")
    ap.add_argument("--extra", default="", help="more flags for experiments/learn.py, space-separated")
    args = ap.parse_args()
    if not Path("/proc/self/statm").exists():
        print("needs /proc (Linux)", file=sys.stderr)
        return 2
    flags = ([] if args.full else SHORT) + args.extra.split()
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "experiments.learn", "--output-dir", out, *flags]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        peaks: dict[str, float] = {"sft": 0.0}
        state = {"phase": "sft"}
        t0 = time.perf_counter()

        def sample() -> None:
            while proc.poll() is None:
                phase = state["phase"]
                peaks[phase] = max(peaks.get(phase, 0.0), tree_rss_mib(proc.pid))
                time.sleep(0.25)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            state["phase"] = phase_of(line, state["phase"])
        rc = proc.wait()
        watcher.join()
    wall = time.perf_counter() - t0
    print(f"\n{' '.join(cmd[1:3])} {' '.join(flags)}: exit {rc}, {wall / 60:.1f} min")
    for phase, mib in peaks.items():
        print(f"  {phase:<12} peak resident {mib:8,.0f} MiB")
    peak = max(peaks.values())
    print(f"peak resident {peak:,.0f} MiB; goal <= {GOAL_MIB:,.0f} MiB: {'met' if peak <= GOAL_MIB else 'missed'}")
    if rc != 0:
        return rc
    sys.path.insert(0, str(Path(__file__).parent))
    from result_line import emit

    shapes = "the whole make learn" if args.full else "make learn's shapes (batch, group, chunk), few steps"
    emit(
        "learn_memory",
        "make learn peak resident memory",
        peak,
        GOAL_MIB,
        "the 4 GB goal (a target, not a measurement)",
        "MiB",
        "lower",
        ", ".join(f"{p} {m:,.0f}" for p, m in peaks.items()),
        note=f"{shapes}; /proc sampled every 0.25 s",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
