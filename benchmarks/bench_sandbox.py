"""Sandbox latency and throughput, side by side with a bare ``python -I -S -c`` in the same run.

Measures, per backend (bubblewrap cold, bubblewrap warm pool, the unsandboxed process backend):
the median and p95 latency of ``print(1)`` and of one HumanEval test run (HumanEval/0's
canonical solution against its tests), and executions per second with every core busy.

Like for like: the bare baseline starts the interpreter exactly as every sandbox backend does,
``python -I -S`` (isolated mode, no ``site``: loading ``site`` alone costs more than a sandbox's
namespaces). Rounds alternate: each round times every backend once, in turn, so all of them see
the same machine load; medians are over rounds.
Usage: ``python benchmarks/bench_sandbox.py [--reps 40]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from result_line import emit

from prm_gym.envs.code.tasks import load_humaneval
from prm_gym.rewards.unit_tests import build_program, run_tests
from prm_gym.sandbox.pool import WarmPool
from prm_gym.sandbox.protocol import make_sandbox
from prm_gym.sandbox.types import Limits

PYTHON = os.path.realpath(sys.executable)
BARE = "bare python -I -S -c"
ISOLATION = (
    "not a peer: the baseline runs the same program without isolation, so the ratio is the isolation's "
    "cost (new namespaces, read-only binds, resource limits, the worker protocol)"
)


def measure(
    fns: dict[str, Callable[[], object]], reps: int, before: dict[str, Callable[[], object]]
) -> dict[str, list[float]]:
    """Seconds per call of every ``fns[name]``, rounds alternated: each round runs each once, in turn."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for rnd in range(reps + 3):  # three warm-up rounds
        for name, fn in fns.items():
            before.get(name, lambda: None)()
            t = time.perf_counter()
            fn()
            if rnd >= 3:
                times[name].append(time.perf_counter() - t)
    return times


def stats(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def throughput(run: Callable[[], object], seconds: float, workers: int) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    def loop() -> int:
        n = 0
        while time.perf_counter() < deadline:
            run()
            n += 1
        return n

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        done = sum(ex.map(lambda _: loop(), range(workers)))
    return done / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    task = load_humaneval().get("HumanEval/0")
    program = build_program(task.answer, task.meta)
    cores = os.cpu_count() or 1
    bare = lambda: subprocess.run([PYTHON, "-I", "-S", "-c", "print(1)"], capture_output=True, check=True)  # noqa: E731
    with contextlib.ExitStack() as stack:
        boxes = {
            name: stack.enter_context(
                make_sandbox(name, limits=Limits(timeout_s=10), **({"size": cores} if name == "bwrap-pool" else {}))
            )
            for name in ("bwrap", "bwrap-pool", "process")
        }
        wait = {name: sb.wait_ready for name, sb in boxes.items() if isinstance(sb, WarmPool)}
        hello = {BARE: bare} | {name: (lambda sb=sb: sb.run("print(1)")) for name, sb in boxes.items()}
        tests = {name: (lambda sb=sb: run_tests(sb, program, task.meta, 10)) for name, sb in boxes.items()}
        hello_t, tests_t = measure(hello, args.reps, wait), measure(tests, args.reps, wait)
        rows = [(name, "print(1)", hello_t[name]) for name in hello]
        rows += [(name, "HumanEval/0 tests", tests_t[name]) for name in tests]
        rounds: dict[str, list[float]] = {name: [] for name in hello}
        for _ in range(5):  # alternated rounds of seconds/5 each
            for name, fn in hello.items():
                rounds[name].append(throughput(fn, args.seconds / 5, cores))
        tput = {name: statistics.median(rates) for name, rates in rounds.items()}
    base = stats(rows[0][2])[0]
    print(f"{'backend':<20} {'program':<18} {'median ms':>10} {'p95 ms':>8} {'vs bare':>8}")
    for name, prog, times in rows:
        med, p95 = stats(times)
        print(f"{name:<20} {prog:<18} {med * 1e3:>10.2f} {p95 * 1e3:>8.2f} {med / base:>7.2f}x")
    print(f"\nexecutions/s of print(1) with {cores} threads busy (median of 5 alternated rounds):")
    for name, rate in tput.items():
        print(f"{name:<20} {rate:>8.1f}/s  ({rate / tput[BARE]:.2f}x bare)")
    by_key = {(name, prog): times for name, prog, times in rows}
    for name, prog, times in rows[1:]:
        base_name, base_times = (BARE, rows[0][2]) if prog == "print(1)" else ("process", [])
        base_times = base_times or by_key.get(("process", prog), [])
        if name == base_name or not base_times:
            continue
        emit(
            "sandbox",
            f"{prog} latency, {name}",
            stats(times)[0] * 1e3,
            stats(base_times)[0] * 1e3,
            f"{base_name} (same program, unsandboxed; both start python -I -S; rounds alternated)",
            "ms",
            "lower",
            f"p95 ours {stats(times)[1] * 1e3:.1f}, baseline {stats(base_times)[1] * 1e3:.1f}",
            ISOLATION,
        )
    for name, rate in tput.items():
        if name != BARE:
            emit(
                "sandbox",
                f"print(1) throughput, {name}",
                rate,
                tput[BARE],
                f"{BARE} (both start python -I -S; median of 5 alternated rounds)",
                "exec/s",
                "higher",
                note=ISOLATION,
            )


if __name__ == "__main__":
    main()
