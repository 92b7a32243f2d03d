"""One rollout turn's search calls of a group over HTTP: one request per call against one batch.

    python benchmarks/bench_search_turn.py [--people 80000] [--group 32] [--rounds 15]

A group of ``--group`` prm/Search-v0 envs (one GRPO group) shares a RetrievalServer in its own
process, serving the generated world's BM25 index (~106k passages at the default size). Each round
every env takes one search turn, stepped one after another as the rollout does, on both sides:

* per call: each env's ``step`` sends its own request (``batch_tools=False``);
* one batch: the turn runs inside :func:`prm_gym.envs.turn_batch.batched_turn`, which sends the
  group's queries as one request, and each ``step`` takes its passages from it.

Both sides make the same env steps (parse, judges, the info contract); each round gives each side
32 query texts no earlier round used (the generated questions), top 3; the sides alternate, and the
figure is the median of the rounds. A second pair of rows times the HTTP calls alone (the client's
``search`` per query against one ``search_batch``), without the env steps.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from result_line import emit, settle, spread

from prm_gym.core.parsing import format_tool_call
from prm_gym.envs.search.env import SearchEnv
from prm_gym.envs.search.index import BM25Index, HTTPRetriever
from prm_gym.envs.search.index.process import RetrievalProcess
from prm_gym.envs.search.tasks import generate_search_tasks, generate_world, world_passages
from prm_gym.envs.turn_batch import batched_turn


def _turn(envs: list[SearchEnv], queries: list[str], batched: bool) -> float:
    """Seconds one search turn of the group takes: every env stepped once, in order."""
    actions = [format_tool_call("search", {"query": q}) for q in queries]
    settle()
    t = time.perf_counter()
    with batched_turn(envs, actions, batched):
        for env, action in zip(envs, actions, strict=True):
            env.step(action)
    return time.perf_counter() - t


def _calls(client: HTTPRetriever, queries: list[str], batched: bool) -> float:
    """Seconds the group's HTTP calls alone take: one per query, or one batch."""
    settle()
    t = time.perf_counter()
    if batched:
        client.search_batch(queries, 3)
    else:
        for q in queries:
            client.search(q, 3)
    return time.perf_counter() - t


def alternate(sides: dict[str, Callable[[list[str]], float]], fresh: Callable[[], list[str]], rounds: int) -> dict:
    """Seconds per side over ``rounds`` alternated rounds (after one warm-up round), fresh queries each call."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for rnd in range(rounds + 1):
        order = list(sides) if rnd % 2 else list(reversed(sides))
        for name in order:
            took = sides[name](fresh())
            if rnd:
                times[name].append(took)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--people", type=int, default=80_000, help="world size (80k people -> ~106k passages)")
    ap.add_argument("--group", type=int, default=32, help="envs in the group (one search each per turn)")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    world = generate_world(args.people, seed=0)
    need = 8 * (args.rounds + 1) * args.group  # twice what the rounds use: a few questions repeat
    questions = [t.prompt for t in generate_search_tasks(world, need, seed=0)]
    pool = iter(dict.fromkeys(questions))
    fresh = lambda: [next(pool) for _ in range(args.group)]  # noqa: E731 - texts no earlier call used
    index = BM25Index.build(world_passages(world))
    with tempfile.TemporaryDirectory() as tmp:
        index.save(Path(tmp) / "index")
        n_passages = len(index)
        del index
        with RetrievalProcess(Path(tmp) / "index") as server:
            envs = [
                SearchEnv(index=server.url, world_people=120, num_tasks=20, max_turns=10_000) for _ in range(args.group)
            ]
            for i, env in enumerate(envs):
                env.reset(seed=i)
            client = HTTPRetriever(server.url)
            turn_sides = {"per call": lambda qs: _turn(envs, qs, False), "one batch": lambda qs: _turn(envs, qs, True)}
            call_sides = {
                "per call": lambda qs: _calls(client, qs, False),
                "one batch": lambda qs: _calls(client, qs, True),
            }
            turns = alternate(turn_sides, fresh, args.rounds)
            calls = alternate(call_sides, fresh, args.rounds)
            client.close()
            for env in envs:
                env.close()
    med = statistics.median
    cond = (
        f"{args.group} prm/Search-v0 envs sharing one RetrievalServer process (BM25, {n_passages} passages, top 3), "
        f"{args.rounds} alternated rounds after a warm-up, {args.group} fresh questions per side and round, "
        f"{os.cpu_count()} cores, load average {load_before} before and "
        + "/".join(f"{x:.1f}" for x in os.getloadavg())
        + " after"
    )
    print(f"one search turn of a group: {cond}")
    for label, times in (("turn (env steps + HTTP)", turns), ("HTTP calls alone", calls)):
        ms = {k: [t * 1e3 for t in v] for k, v in times.items()}
        for side in ms:
            print(f"  {label:<24} {side:<10} {med(ms[side]):8.2f} ms per turn  ({spread(ms[side])})"
                  f"  {med(ms[side]) / args.group:6.3f} ms per env")  # fmt: skip
        row = f"one search turn of a {args.group}-env group over HTTP, " + (
            "one batch request" if label.startswith("turn") else "one batch request, the HTTP calls alone"
        )
        emit("search_turn", row, med(ms["one batch"]), med(ms["per call"]),
             "the same turn with one request per search call (what each env's step does alone); " + cond,
             "ms/turn", "lower", f"ours {spread(ms['one batch'])}, per call {spread(ms['per call'])}")  # fmt: skip


if __name__ == "__main__":
    main()
