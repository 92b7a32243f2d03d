"""Rollout throughput: in-process versus Ray rollout workers (1 and 2), on the same workload;
and the training loop on one Ray worker, asynchronous versus synchronous.

Every backend plays the same GRPO groups (prm/Math-v0, hf:tiny, greedy, fixed seeds) after a
warm-up round; we report episodes/s (median and spread over repetitions), the ratio against
in-process, and the per-episode overhead Ray adds (1 worker versus in-process).

Then ``train`` (what ``train-agent --backend ray`` runs) trains the same run twice
on one worker, with and without ``--asynchronous.enabled``: seconds per step (the wait for the
step's groups plus the learner step, from metrics.jsonl; the median over the steps after the
first, which both modes play synchronously). The learner uses ``--threads`` torch threads (1), so
on two cores the learner and the worker each have one: with more learner threads than free cores,
OpenMP's spinning threads starve the worker and the overlap buys nothing.

    .venv/bin/python benchmarks/bench_ray.py [--groups 4] [--reps 3] [--threads 1] [--train-steps 6]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.policy import SamplingParams
from prm_gym.training.distributed import RayRollouts
from prm_gym.training.sources import LocalRollouts
from prm_gym.training.worker import WorkerSpec

SAMPLING = SamplingParams(max_new_tokens=16, temperature=0.0)


def _time(play: Callable[[], int], reps: int) -> list[float]:
    play()  # warm-up
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        n = play()
        rates.append(n / (time.perf_counter() - t0))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads in-process (Ray actors get 1 per CPU)")
    ap.add_argument("--train-steps", type=int, default=6, help="steps of each training run (async vs sync)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)  # a fair baseline: Ray sets OMP_NUM_THREADS=1 in 1-CPU actors
    env = gym.make("prm/Math-v0")
    ids = list(env.unwrapped.tasks.ids)[: args.groups]  # type: ignore[attr-defined]
    env.close()
    groups = [(t, list(range(args.group_size))) for t in ids]
    spec = WorkerSpec("prm/Math-v0")
    results: dict[str, list[float]] = {}
    local = LocalRollouts(spec)
    results["in-process"] = _time(lambda: sum(len(g) for g in local.collect(groups, SAMPLING, 1024)[0]), args.reps)
    local.close()
    for n in (1, 2):
        with RayRollouts(spec, num_workers=n, cpus_per_worker=1) as pool:
            results[f"ray x{n}"] = _time(
                lambda: sum(len(g) for g in pool.collect(groups, SAMPLING, 1024)[0]), args.reps
            )
    base = statistics.median(results["in-process"])
    print(f"{'backend':<12}{'episodes/s':>12}{'spread':>10}{'vs in-process':>16}")
    for name, rates in results.items():
        med = statistics.median(rates)
        print(f"{name:<12}{med:>12.2f}{max(rates) - min(rates):>10.2f}{med / base:>15.2f}x")
    overhead = 1 / statistics.median(results["ray x1"]) - 1 / base
    print(f"Ray overhead per episode (1 worker vs in-process): {overhead * 1000:.1f} ms")
    from result_line import emit, spread  # the machine-readable row for run_all.py

    for name in ("ray x1", "ray x2"):
        mine = results[name]
        spreads = f"ours {spread(mine)}, in-process {spread(results['in-process'])}"
        row = f"rollout episodes/s, {name}"
        note = (
            "not a peer: one Ray worker does the in-process work plus the actor hop (sending the groups, "
            "returning the trajectories), so the ratio is that hop's cost; workers beyond one add throughput"
            if name == "ray x1"
            else ""
        )
        emit("ray", row, statistics.median(mine), base, "in-process", "ep/s", "higher", spreads, note)
    train_rows(args.train_steps)


def seconds_per_step(asynchronous: bool, steps: int, out: Path) -> list[float]:
    """Per-step seconds (groups waited for + learner step) of a ``--backend ray`` run on one worker."""
    from prm_gym.training.config import AsyncConfig, SamplingConfig, TrainConfig
    from prm_gym.training.metrics import read_metrics
    from prm_gym.training.trainer import train

    cfg = TrainConfig(
        backend="ray",
        num_workers=1,
        steps=steps,
        group_size=2,
        tasks_per_step=4,
        output_dir=str(out),
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        sampling=SamplingConfig(max_new_tokens=16),
        asynchronous=AsyncConfig(enabled=asynchronous, max_staleness=1),
    )
    train(cfg)
    rows = [r for r in read_metrics(out) if "learn_s" in r][1:]  # step 1 is synchronous in both modes
    return [r["rollout_s"] + r["learn_s"] for r in rows]


def train_rows(steps: int) -> None:
    from result_line import emit, spread

    with tempfile.TemporaryDirectory(prefix="bench-ray-train-") as tmp:
        sync = seconds_per_step(False, steps, Path(tmp) / "sync")
        asyn = seconds_per_step(True, steps, Path(tmp) / "async")
    s, a = statistics.median(sync), statistics.median(asyn)
    print(f"\ntrain-agent --backend ray, 1 worker, {steps} steps: s/step sync {s:.3f}, async {a:.3f} ({s / a:.2f}x)")
    emit(
        "ray",
        "training s/step, ray x1, --asynchronous.enabled",
        a,
        s,
        "the same run, synchronous",
        "s",
        "lower",
        f"ours {spread(asyn)}, sync {spread(sync)}",
    )


if __name__ == "__main__":
    main()
