"""Async (bounded staleness) against sync wall-clock on a latency-skewed rollout workload.

Workload: GRPO groups on prm/Math-v0 (real env, real judge) played by a scripted policy, with
each episode's tool latency drawn from a heavy-tailed distribution (most episodes 20 ms per
turn, one in eight 400 ms): the straggler pattern of real tool calls. Four rollout worker
threads play a step's four groups; the learner step is a fixed 0.6 s of work (about one step's
rollouts, as in a CPU run of SmolLM2, where an update and a step's rollouts take comparable time).
Both arms use the trainer's own pieces: one in-process rollout source
(:class:`prm_gym.training.sources.LocalRollouts`) driven by :class:`prm_gym.training.asyncrl.Prefetcher`.
"sync" has depth 0 (each step's groups are played after the previous update, so rollouts and
learner alternate); "async" plays up to 2 steps ahead (``max_staleness=2``) while the learner
trains. Same source, same groups and latencies (seeded), same number of steps; the arms alternate
within each repetition. Prints median and spread over repetitions, the ratio, and the bound overlap
cannot beat: (rollout + learn) / max(rollout, learn) per step, with the rollout time read off the
sync arm (its wall time per step less the learner's).

    .venv/bin/python benchmarks/bench_async.py
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.models import tiny_tokenizer
from prm_gym.core.policy import FakePolicy, SamplingParams
from prm_gym.training.asyncrl import Prefetcher
from prm_gym.training.sources import LocalRollouts
from prm_gym.training.worker import WorkerSpec

STEPS, GROUPS, WORKERS, LEARN_S = 8, 4, 4, 0.6


class Latency(gym.Wrapper):
    """Sleeps a per-episode latency on every step (an episode is slow with probability 1/8)."""

    def __init__(self, env: gym.Env, run_seed: int):
        super().__init__(env)
        self.run_seed, self.delay = run_seed, 0.02

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        # drawn from (run seed, episode seed, task): both arms see the same latencies
        task = (options or {}).get("task_id", "")
        rng = np.random.default_rng([self.run_seed, int(seed or 0), sum(map(ord, task))])
        self.delay = 0.4 if rng.random() < 1 / 8 else 0.02
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        time.sleep(self.delay)
        return self.env.step(action)


def script(prompt: str, call: int) -> str:
    return "let me think" if call % 3 else "<answer>7</answer>"


def run(staleness: int, seed: int) -> float:
    env_id = f"bench/SlowMath-{seed}-v0"
    if env_id not in gym.registry:
        gym.register(
            env_id,
            entry_point=lambda **kw: Latency(gym.make("prm/Math-v0", levels=[1], num_tasks=50, max_turns=3), seed),
        )
    source = LocalRollouts(WorkerSpec(env_id), policies=[FakePolicy(tiny_tokenizer(), script) for _ in range(WORKERS)])
    params = SamplingParams(max_new_tokens=16)

    def collect(step: int) -> Any:
        jobs = [(f"math-train-0-{(step * GROUPS + g) % 50:05d}", [step, g]) for g in range(GROUPS)]
        return source.collect(jobs, params, 2048)

    pre = Prefetcher(collect, staleness, STEPS)
    start = time.perf_counter()
    try:
        for v in range(STEPS):
            pre.get(v)
            time.sleep(LEARN_S)  # the learner's update
            source.publish(None, v + 1, wait=staleness == 0)
        return time.perf_counter() - start
    finally:
        pre.close(source.cancel)
        source.close()


def main() -> None:
    run(0, 99)  # warm-up
    reps = 5
    sync, asyn = [], []
    for s in range(reps):  # the arms alternate, each on the same seeded latencies
        sync.append(run(0, s))
        asyn.append(run(2, s))
    ratios = [a / b for a, b in zip(sync, asyn, strict=True)]
    print(f"{'mode':<8}{'median s':>10}{'min':>8}{'max':>8}")
    for name, xs in (("sync", sync), ("async", asyn)):
        print(f"{name:<8}{statistics.median(xs):>10.2f}{min(xs):>8.2f}{max(xs):>8.2f}")
    print(f"speed-up async/sync: median {statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f})")
    rollout = statistics.median(sync) / STEPS - LEARN_S
    bound = (rollout + LEARN_S) / max(rollout, LEARN_S)
    print(f"per step: rollouts {rollout:.2f} s, learner {LEARN_S:.2f} s; overlap cannot beat {bound:.2f}x")
    from result_line import emit, spread  # the machine-readable row for run_all.py

    emit(
        "async",
        "async GRPO (staleness 2) wall time",
        statistics.median(asyn),
        statistics.median(sync),
        f"the same run, synchronous (staleness 0); 5 alternated rounds; {WORKERS} rollout threads; per step "
        f"{rollout:.2f} s of rollouts and {LEARN_S:.2f} s of learner, so overlap cannot beat {bound:.2f}x",
        "s",
        "lower",
        f"ours {spread(asyn)}, baseline {spread(sync)}",
    )


if __name__ == "__main__":
    main()
