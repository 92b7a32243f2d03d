"""Sandbox latency and throughput, side by side with a bare ``python -c`` in the same run.

Measures, per backend (bubblewrap cold, bubblewrap warm pool, the unsandboxed process backend):
the median and p95 latency of ``print(1)`` and of one HumanEval test run (HumanEval/0's
canonical solution against its tests), and executions per second with every core busy.
Usage: ``python benchmarks/bench_sandbox.py [--reps 40]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from result_line import emit

from prm_gym.envs.code_tasks import load_humaneval
from prm_gym.rewards.unit_tests import build_program, run_tests
from prm_gym.sandbox.pool import WarmPool
from prm_gym.sandbox.protocol import make_sandbox
from prm_gym.sandbox.types import Limits

PYTHON = os.path.realpath(sys.executable)


def measure(fn: Callable[[], object], reps: int, before: Callable[[], object] = lambda: None) -> list[float]:
    for _ in range(3):  # warm-up
        before()
        fn()
    times = []
    for _ in range(reps):
        before()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
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
    bare = lambda: subprocess.run([PYTHON, "-c", "print(1)"], capture_output=True, check=True)  # noqa: E731
    rows: list[tuple[str, str, list[float]]] = [("bare python -c", "print(1)", measure(bare, args.reps))]
    base = stats(rows[0][2])[0]
    tput = {"bare python -c": throughput(bare, args.seconds, cores)}
    for name in ("bwrap", "bwrap-pool", "process"):
        kwargs = {"size": cores} if name == "bwrap-pool" else {}
        with make_sandbox(name, limits=Limits(timeout_s=10), **kwargs) as sb:
            wait = (lambda sb=sb: sb.wait_ready()) if isinstance(sb, WarmPool) else (lambda: None)
            rows.append((name, "print(1)", measure(lambda sb=sb: sb.run("print(1)"), args.reps, wait)))
            he = lambda sb=sb: run_tests(sb, program, task.meta, 10)  # noqa: E731
            rows.append((name, "HumanEval/0 tests", measure(he, args.reps, wait)))
            tput[name] = throughput(lambda sb=sb: sb.run("print(1)"), args.seconds, cores)
    print(f"{'backend':<16} {'program':<18} {'median ms':>10} {'p95 ms':>8} {'vs bare':>8}")
    for name, prog, times in rows:
        med, p95 = stats(times)
        print(f"{name:<16} {prog:<18} {med * 1e3:>10.2f} {p95 * 1e3:>8.2f} {med / base:>7.2f}x")
    print(f"\nexecutions/s of print(1) with {cores} threads busy:")
    for name, rate in tput.items():
        print(f"{name:<16} {rate:>8.1f}/s  ({rate / tput['bare python -c']:.2f}x bare)")
    by_key = {(name, prog): times for name, prog, times in rows}
    for name, prog, times in rows[1:]:
        base_name, base_times = ("bare python -c", rows[0][2]) if prog == "print(1)" else ("process", [])
        base_times = base_times or by_key.get(("process", prog), [])
        if name == base_name or not base_times:
            continue
        emit(
            "sandbox",
            f"{prog} latency, {name}",
            stats(times)[0] * 1e3,
            stats(base_times)[0] * 1e3,
            f"{base_name} (same program, unsandboxed)",
            "ms",
            "lower",
            f"p95 ours {stats(times)[1] * 1e3:.1f}, baseline {stats(base_times)[1] * 1e3:.1f}",
            "not a peer: the baseline runs the same program without isolation, so the ratio is the isolation's "
            "cost (new namespaces, read-only binds, resource limits)",
        )
    for name, rate in tput.items():
        if name != "bare python -c":
            bare_rate = tput["bare python -c"]
            emit("sandbox", f"print(1) throughput, {name}", rate, bare_rate, "bare python -c", "exec/s", "higher")


if __name__ == "__main__":
    main()
