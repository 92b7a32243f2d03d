"""Benchmark of the LLM judge client against the in-process OpenAI-compatible fake server.

Measures judging a batch of turns with bounded concurrency against a baseline of one request at
a time (the same client, ``concurrency=1``), plus the cost of cache hits and of the guards. The
fake server sleeps ``DELAY_S`` per request to stand in for model latency.

    .venv/bin/python benchmarks/bench_rewards.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from result_line import emit, spread

from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards.guards import check
from prm_gym.rewards.llm_judge import LLMJudge
from prm_gym.rewards.openai_fake import FakeOpenAIServer
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.types import Turn

DELAY_S = 0.02
BATCH = 32
REPS = 5
TASK = Task("t", "What is 6 times 7?", "42")


def turns(tag: str) -> list[Turn]:
    out = []
    for i in range(BATCH):
        action = f"Step {i} ({tag}): multiply 6 by 7 to get the product. <answer>42</answer>"
        out.append(Turn(TASK, i, action, parse_action(action)))
    return out


def measure(fn: Callable[[int], object]) -> list[float]:
    fn(-1)  # warm-up
    times = []
    for rep in range(REPS):
        start = time.perf_counter()
        fn(rep)
        times.append(time.perf_counter() - start)
    return times


def alternated(a: Callable[[int], object], b: Callable[[int], object]) -> tuple[list[float], list[float]]:
    """Seconds per call of ``a`` and ``b`` in alternated rounds (each round runs each once) after a warm-up."""
    ta, tb = [], []
    for rep in range(-1, REPS):
        for fn, times in ((a, ta), (b, tb)):
            start = time.perf_counter()
            fn(rep)
            if rep >= 0:
                times.append(time.perf_counter() - start)
    return ta, tb


def report(label: str, times: list[float], baseline: float | None = None) -> float:
    med = statistics.median(times)
    spread = (max(times) - min(times)) / 2
    ratio = f"  x{baseline / med:6.2f} vs baseline" if baseline else ""
    print(f"{label:<44} median {med * 1000:8.2f} ms  ± {spread * 1000:6.2f} ms{ratio}")
    return med


def main() -> None:
    with FakeOpenAIServer(reply=lambda m: '{"score": 7, "reason": "ok"}', delay_s=DELAY_S) as server:
        seq = LLMJudge(base_url=server.base_url, concurrency=1, cache_size=0)
        par = LLMJudge(base_url=server.base_url, concurrency=8, cache_size=0)
        cached = LLMJudge(base_url=server.base_url, concurrency=8)
        print(f"batch of {BATCH} turns, fake server latency {DELAY_S * 1000:.0f} ms/request, {REPS} reps")
        seq_times, par_times = alternated(
            lambda r: score_batch(seq, turns(f"s{r}")), lambda r: score_batch(par, turns(f"p{r}"))
        )
        base = report("llm/turn, concurrency=1 (baseline)", seq_times)
        conc = report("llm/turn, concurrency=8", par_times, base)
        emit(
            "rewards",
            f"LLM judge batch of {BATCH}, concurrency 8",
            conc * 1e3,
            statistics.median(seq_times) * 1e3,
            "same client, one request at a time; alternated rounds",
            "ms",
            "lower",
            f"ours {spread([t * 1e3 for t in par_times])}, baseline {spread([t * 1e3 for t in seq_times])}",
        )
        fixed = turns("cached")
        score_batch(cached, fixed)
        report("llm/turn, all cache hits", measure(lambda r: score_batch(cached, fixed)), base)
        texts = [t.action for t in fixed] * 30
        guard = measure(lambda r: [check(t, TASK.prompt) for t in texts])
        report(f"guards.check on {len(texts)} texts", guard, base)
        print(f"server saw {len(server.requests)} requests, at most {server.max_in_flight} in flight")
        # Every turn of the timed rounds (and their warm-up) must reach the judge: a turn the parse
        # rejects scores 0 without a request, and the rows would time nothing.
        expected = 2 * (REPS + 1) * BATCH + BATCH
        if len(server.requests) != expected:
            raise SystemExit(f"the judge sent {len(server.requests)} requests, not {expected}: the rows are void")


if __name__ == "__main__":
    main()
