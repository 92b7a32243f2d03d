"""Benchmark the embedded BM25 backend against bm25s and pyserini on a generated corpus.

    python benchmarks/bench_search.py [--people 80000] [--queries 2000] [--reps 5] [--dense 2000]

Measures, on the same corpus (the fictional world, ~100k passages at the default size) and the
same queries (its generated questions): index build time, queries/s with k=10 (warm-up, then
``--reps`` repetitions; median and spread), the top-10 overlap of the embedded backend with
pyserini (when installed) and bm25s, and the env's own per-step overhead (retrieval and judges
excluded). Ratios are against bm25s, measured in the same run. ``--dense N`` adds the dense
backend (all-MiniLM-L6-v2) on the first N passages: passages embedded per second and queries/s,
against the embedded BM25 on the same N passages.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from result_line import emit, spread

from prm_gym.core.parsing import format_tool_call
from prm_gym.envs.search import SearchEnv
from prm_gym.envs.search_index import BM25Index, Passage, write_corpus
from prm_gym.envs.search_tasks import generate_search_tasks, generate_world, world_passages


def _timed(fn: Callable[[], object], reps: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _row(name: str, build_s: float, times: list[float], nq: int, base_qps: float | None) -> float:
    qps = [nq / t for t in times]
    med = statistics.median(qps)
    ratio = f"{med / base_qps:6.2f}x" if base_qps else "   -   "
    print(f"{name:<12} build {build_s:7.2f}s   {med:9.0f} q/s  (min {min(qps):.0f}, max {max(qps):.0f})  {ratio}")
    return med


def _bm25s(passages: list[Passage], queries: list[str], reps: int) -> tuple[float, list[float], list[list[str]]]:
    import bm25s
    import Stemmer

    stem = Stemmer.Stemmer("porter")
    t = time.perf_counter()
    retriever = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
    retriever.index(
        bm25s.tokenize([p.contents for p in passages], stopwords="en", stemmer=stem, show_progress=False),
        show_progress=False,
    )
    build = time.perf_counter() - t

    def run() -> list[list[str]]:
        toks = bm25s.tokenize(queries, stopwords="en", stemmer=stem, show_progress=False)
        docs, _ = retriever.retrieve(toks, k=10, show_progress=False, n_threads=1)
        return [[passages[int(i)].id for i in row] for row in docs]

    return build, _timed(run, reps), run()


def _pyserini(
    passages: list[Passage], queries: list[str], reps: int, tmp: Path
) -> tuple[float, list[float], list[list[str]]] | None:
    try:
        import pyserini  # noqa: F401

        from prm_gym.envs.search_index.pyserini_backend import PyseriniRetriever, build_lucene_index
    except ImportError:
        print("pyserini      not installed (pip install 'prm-gym[pyserini]'): skipped")
        return None
    corpus = write_corpus(passages, tmp / "corpus" / "docs.jsonl")
    t = time.perf_counter()
    build_lucene_index(corpus, tmp / "lucene", threads=2)
    build = time.perf_counter() - t
    r = PyseriniRetriever(tmp / "lucene", threads=2)

    def run() -> list[list[str]]:
        return [[p.id for p in hits] for hits in r.search_batch(queries, 10)]

    return build, _timed(run, reps), run()


def _dense(passages: list[Passage], queries: list[str], reps: int) -> None:
    try:
        from prm_gym.envs.search_index.dense import DenseIndex, Encoder
    except ImportError:
        print("dense         not installed (pip install 'prm-gym[dense]'): skipped")
        return
    enc = Encoder()
    t = time.perf_counter()
    dense = DenseIndex.build(passages, enc)
    build = time.perf_counter() - t
    small = BM25Index.build(passages).warm()
    base = _row(
        f"bm25 {len(passages)}", 0.0, _timed(lambda: [small.rank(q, 10) for q in queries], reps), len(queries), None
    )
    _row("dense numpy", build, _timed(lambda: dense.search_batch(queries, 10), reps), len(queries), base)
    print(f"dense: {len(passages) / build:.0f} passages embedded/s")


def _overlap(a: list[list[str]], b: list[list[str]]) -> float:
    return statistics.mean(len(set(x) & set(y)) / max(len(x), 1) for x, y in zip(a, b, strict=True))


def _step_overhead(index: BM25Index, steps: int = 2000) -> tuple[float, float]:
    """Median microseconds per env step, with search calls, minus the retrieval time itself."""
    env = SearchEnv(index=index, judge="rule/exact_match + 0.1*rule/format")
    env.reset(seed=0)
    action = format_tool_call("search", {"query": env.task.prompt if env.task else "x"})
    per_step, per_search = [], []
    for _ in range(5):
        t = time.perf_counter()
        for i in range(steps):
            if i % 3 == 0:
                env.reset(seed=i)
            env.step(action)
        per_step.append((time.perf_counter() - t) / steps)
        t = time.perf_counter()
        for _ in range(steps):
            env.search(env.task.prompt if env.task else "x")
        per_search.append((time.perf_counter() - t) / steps)
    return statistics.median(per_step) * 1e6, statistics.median(per_search) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--people", type=int, default=80_000, help="world size (80k people -> ~106k passages)")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dense", type=int, default=0, help="passages for the dense backend run (0: skip)")
    args = ap.parse_args()
    world = generate_world(args.people, seed=0)
    passages = world_passages(world)
    queries = [t.prompt for t in generate_search_tasks(world, args.queries, seed=0)]
    print(f"corpus: {len(passages)} generated passages, {len(queries)} questions, k=10\n")

    t = time.perf_counter()
    index = BM25Index.build(passages).warm()
    build = time.perf_counter() - t
    ours_times = _timed(lambda: [index.rank(q, 10) for q in queries], args.reps)
    ours = [[p.id for p in index.search(q, 10)] for q in queries]

    b_build, b_times, b_ids = _bm25s(passages, queries, args.reps)
    base = _row("bm25s", b_build, b_times, len(queries), None)
    mine = _row("prm bm25", build, ours_times, len(queries), base)
    qps = lambda times: spread([len(queries) / t for t in times])  # noqa: E731
    spreads = f"ours {qps(ours_times)}, bm25s {qps(b_times)}"
    emit("search", "BM25 queries/s, k=10", mine, base, "bm25s (lucene BM25, same corpus)", "q/s", "higher", spreads)
    emit("search", "BM25 index build", build, b_build, "bm25s (same corpus)", "s", "lower", "one build each")
    with tempfile.TemporaryDirectory() as tmp:
        got = _pyserini(passages, queries, args.reps, Path(tmp))
        if got:
            theirs = _row("pyserini", got[0], got[1], len(queries), base)
            print(f"\ntop-10 overlap with pyserini: {_overlap(ours, got[2]):.3f}")
            spreads = f"ours {qps(ours_times)}, pyserini {qps(got[1])}"
            emit(
                "search", "BM25 queries/s, k=10 (vs Lucene)", mine, theirs, "pyserini/Lucene", "q/s", "higher", spreads
            )
    print(f"top-10 overlap with bm25s:    {_overlap(ours, b_ids):.3f}")
    hit = statistics.mean(
        t.meta["gold_ids"][0] in ids
        for t, ids in zip(generate_search_tasks(world, args.queries, seed=0), ours, strict=True)
    )
    print(f"gold passage in top-10:       {hit:.3f}")
    if args.dense:
        print()
        _dense(passages[: args.dense], queries[:200], args.reps)
    small = BM25Index.build(world_passages(generate_world(300, 0))).warm()
    step_us, search_us = _step_overhead(small)
    print(
        f"\nenv step (300-person world):  {step_us:.0f} us/step, of which retrieval {search_us:.0f} us;"
        f" env overhead {step_us - search_us:.0f} us"
    )


if __name__ == "__main__":
    main()
