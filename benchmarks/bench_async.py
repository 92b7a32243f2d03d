"""Async (bounded staleness) against sync wall-clock on a latency-skewed rollout workload.

Workload: GRPO groups on prm/Math-v0 (real env, real judge) played by a scripted policy, with
each episode's tool latency drawn from a heavy-tailed distribution (most episodes 20 ms per
turn, one in eight 400 ms): the straggler pattern of real tool calls. The learner step is a
fixed 150 ms of work. "sync" is the same collector with ``max_staleness=0`` (each batch is
generated entirely by the current weights, so the learner waits for the slowest group and the
producers wait for the learner); "async" allows ``max_staleness=2``. Same producers, same groups,
same number of steps. Prints median and spread over repetitions, and the ratio.

    .venv/bin/python benchmarks/bench_async.py
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.models import tiny_tokenizer
from prm_gym.core.policy import FakePolicy
from prm_gym.training.asyncrl import AsyncCollector

STEPS, GROUPS, GROUP_SIZE, PRODUCERS, LEARN_S = 8, 4, 2, 8, 0.15


class Latency(gym.Wrapper):
    """Sleeps a per-episode latency on every step (episode drawn slow with probability 1/8)."""

    def __init__(self, env: gym.Env, rng: np.random.Generator):
        super().__init__(env)
        self.rng, self.delay = rng, 0.02

    def reset(self, **kw: Any) -> Any:
        self.delay = 0.4 if self.rng.random() < 1 / 8 else 0.02
        return self.env.reset(**kw)

    def step(self, action: Any) -> Any:
        time.sleep(self.delay)
        return self.env.step(action)


def script(prompt: str, call: int) -> str:
    return "let me think" if call % 3 else "<answer>7</answer>"


def run(staleness: int, seed: int) -> float:
    tok = tiny_tokenizer()
    rng = np.random.default_rng(seed)

    def make_env() -> gym.Env:
        return Latency(gym.make("prm/Math-v0", levels=[1], num_tasks=50, max_turns=3), rng)

    def load(policy: Any, state: Any, version: int) -> None:
        policy.version = version

    col = AsyncCollector(
        lambda p: FakePolicy(tok, script),
        load,
        make_env,
        ChatTemplate(tok),
        lambda i: (f"math-train-0-{i % 50:05d}", i),
        group_size=GROUP_SIZE,
        groups_per_step=GROUPS,
        max_staleness=staleness,
        producers=PRODUCERS,
    ).start()
    start = time.perf_counter()
    try:
        for v in range(STEPS):
            col.next_batch(v)
            time.sleep(LEARN_S)  # the learner's update
            col.publish(v + 1, None)
        return time.perf_counter() - start
    finally:
        col.close()


def main() -> None:
    run(0, 99)  # warm-up
    reps = 5
    sync, asyn = [], []
    for s in range(reps):  # alternated rounds: both modes see the same machine load
        sync.append(run(0, s))
        asyn.append(run(2, s))
    ratios = [a / b for a, b in zip(sync, asyn, strict=True)]
    print(f"{'mode':<8}{'median s':>10}{'min':>8}{'max':>8}")
    for name, xs in (("sync", sync), ("async", asyn)):
        print(f"{name:<8}{statistics.median(xs):>10.2f}{min(xs):>8.2f}{max(xs):>8.2f}")
    print(
        f"speed-up async/sync: median {statistics.median(ratios):.2f}x "
        f"(range {min(ratios):.2f}-{max(ratios):.2f}); target >= 2.5x"
    )
    from result_line import emit, spread  # the machine-readable row for run_all.py

    emit(
        "async",
        "async GRPO (staleness 2) wall time",
        statistics.median(asyn),
        statistics.median(sync),
        "the same run, synchronous (staleness 0); 5 alternated rounds",
        "s",
        "lower",
        f"ours {spread(asyn)}, baseline {spread(sync)}",
    )


if __name__ == "__main__":
    main()
