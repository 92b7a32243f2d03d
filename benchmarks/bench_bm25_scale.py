"""BM25 per-query cost as the corpus grows, against pyserini (Lucene), on an independent Zipf corpus.

    python benchmarks/bench_bm25_scale.py [--sizes 10000,100000] [--queries 300] [--reps 3]
    python benchmarks/bench_bm25_scale.py --sizes 10000,100000,1000000    # the documented rows
    python benchmarks/bench_bm25_scale.py --big 5000000 --queries 100     # ours alone, larger
    python benchmarks/bench_bm25_scale.py --sizes 1000000 --from-ids --vocab 1000000,60000 --words 40-120
        # both documented corpora (issue 46); --query-from passages: keywords of random passages;
        # --keep DIR reuses pyserini's index of the same corpus across runs
    python benchmarks/real_text_corpus.py --out runs/dictd.jsonl    # real English text (Debian's dict-* packages)
    python benchmarks/bench_bm25_scale.py --corpus runs/dictd.jsonl --queries 300 --reps 3

The corpus is NOT the project's generator: every passage is a bag of words drawn independently
from a Zipf law (rank r has probability proportional to r**-exponent, ``--zipf``) over ``--vocab``
words (``w<rank>``, which both analyzers keep as they are; several vocabularies, comma-separated,
are several corpora), with a length drawn uniformly from ``--words`` (default 80-120; DPR Wikipedia
passages hold 100). Queries draw their words from the same law, or (``--query-from passages``) are
distinct words of a random passage; their lengths follow a short-query distribution (3 to 8 words,
P = .30 .25 .18 .12 .08 .07). Per size:
both engines index the same passages, then answer the same queries at k=10 on one thread each,
in alternated rounds after a warm-up round; the row is milliseconds per query (median round).
Printed beside it: top-10 overlap with pyserini, whether our top 10 (ids and scores) equal an
exhaustive float32 scorer on every query, and the memory of our index arrays.

``--corpus PATH.jsonl`` runs the same protocol on a corpus of real text instead (see
:func:`corpus_row`): ours as the Search env opens a ``.jsonl`` corpus, pyserini with its default
analyzer, so the top-10 overlap also measures how far the two analyzers differ on real text.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
from result_line import emit, spread

from prm_gym.envs.search.index import BM25Index, Passage, open_retriever, write_corpus
from prm_gym.envs.search.index.analyzer import Analyzer
from prm_gym.envs.search.index.bm25 import bm25_avgdl, postings_in_chunks

QUERY_LENGTHS = (3, 4, 5, 6, 7, 8)
QUERY_LENGTH_P = (0.30, 0.25, 0.18, 0.12, 0.08, 0.07)


def zipf_sampler(vocab: int, exponent: float, rng: np.random.Generator) -> Callable[[int], np.ndarray]:
    """Draws of word ranks (0 commonest) with probability proportional to (rank + 1) ** -exponent."""
    cdf = np.cumsum(np.arange(1, vocab + 1, dtype=np.float64) ** -exponent)
    cdf /= cdf[-1]
    return lambda size: np.minimum(np.searchsorted(cdf, rng.random(size)), vocab - 1)


def zipf_corpus(
    n: int, vocab: int, exponent: float, nq: int, seed: int = 0, words_per: tuple[int, int] = (80, 120)
) -> tuple[list[Passage], list[str]]:
    """``n`` passages and ``nq`` queries of Zipf-drawn words (see the module docstring)."""
    rng = np.random.default_rng(seed)
    draw = zipf_sampler(vocab, exponent, rng)
    words = [f"w{r}" for r in range(vocab)]
    passages: list[Passage] = []
    for lo in range(0, n, 50_000):
        lengths = rng.integers(words_per[0], words_per[1] + 1, min(50_000, n - lo))
        ranks = draw(int(lengths.sum())).tolist()
        at = 0
        for i, ln in enumerate(lengths.tolist()):
            passages.append(Passage(f"p{lo + i:08d}", "", " ".join([words[r] for r in ranks[at : at + ln]])))
            at += ln
    qlens = rng.choice(QUERY_LENGTHS, nq, p=QUERY_LENGTH_P)
    queries = [" ".join(words[r] for r in draw(int(m)).tolist()) for m in qlens]
    return passages, queries


def alternate(fns: dict[str, Callable[[], object]], reps: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds (this process, every thread: a JVM's too) per call of each function,
    in alternated rounds after one warm-up round. On a shared machine the CPU time is the steadier
    measure; both are printed."""
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for rnd in range(reps + 1):
        for name, fn in fns.items():
            t, c = time.perf_counter(), time.process_time()
            fn()
            if rnd:
                wall[name].append(time.perf_counter() - t)
                cpu[name].append(time.process_time() - c)
    return wall, cpu


def exhaustive(index: BM25Index, query: str, k: int) -> tuple[list[int], list[float]]:
    """Every document scored (float32, terms in query order); the k best, ties by lower index."""
    scores = np.zeros(len(index), dtype=np.float32)
    for tok in index.analyzer(query):
        t = index.vocab.get(tok)
        if t is not None:
            s, e = index.indptr[t], index.indptr[t + 1]
            scores[index.doc_ids[s:e]] += index.impacts[s:e]
    kth = np.partition(scores, len(scores) - k)[len(scores) - k] if len(scores) > k else np.float32(0)
    cand = np.flatnonzero(scores >= kth)  # the k best and their ties, then ordered as a full sort would
    top = cand[np.lexsort((cand, -scores[cand]))][:k]
    top = top[scores[top] > 0]
    return top.tolist(), scores[top].tolist()


def index_bytes(index: BM25Index) -> int:
    return int(index.indptr.nbytes + index.doc_ids.nbytes + index.impacts.nbytes + index.blockmax.nbytes)


def one_size(n: int, args: argparse.Namespace, tmp: Path) -> None:
    t = time.perf_counter()
    passages: list[Passage] = []
    if args.from_ids:  # our index from the word ranks; pyserini's from the same passages as text
        index, build = index_from_ids(n, args)
        queries, gen_s = id_queries(n, args), 0.0
    else:
        passages, queries = zipf_corpus(n, args.vocab, args.exponent, args.queries, seed=n, words_per=args.words)
        gen_s = time.perf_counter() - t
        t = time.perf_counter()
        index = BM25Index.build(passages).warm()
        build = time.perf_counter() - t
    if args.query_from == "passages":
        queries = passage_queries(n, args, passages)
    postings = len(index.doc_ids)
    print(f"\n{n} passages (generated in {gen_s:.0f}s), {len(index.vocab)} terms, {postings} postings; "
          f"{len(queries)} queries, k=10, 1 thread, {args.reps} alternated rounds")  # fmt: skip
    print(f"prm bm25   build {build:6.1f}s   index arrays {index_bytes(index) / 2**20:,.0f} MiB "
          f"(block tables {index.blockmax.nbytes / 2**20:,.0f} MiB)")  # fmt: skip
    key = f"{n}-v{args.vocab}-z{args.exponent}-w{args.words[0]}-{args.words[1]}{'-ids' if args.from_ids else ''}"

    def scratch_corpus() -> Path:
        where = tmp / f"c{key}" / "docs.jsonl"
        return write_id_corpus(n, args, where) if args.from_ids else write_corpus(passages, where)

    cond = (
        f"pyserini/Lucene, 1 thread each, same {len(queries)} queries; independent Zipf corpus (vocab "
        f"{args.vocab:,}, exponent {args.exponent}, {args.words[0]}-{args.words[1]} words a passage; "
        f"queries drawn from the {'law' if args.query_from == 'law' else 'passages'}), alternated rounds"
    )
    compare(index, queries, args, tmp / f"l{key}", scratch_corpus, f"{n:,} Zipf passages{corpus_tag(args)}", cond)


def compare(
    index: BM25Index,
    queries: Sequence[str],
    args: argparse.Namespace,
    lucene: Path,
    corpus: Path | Callable[[], Path],
    row: str,
    cond: str,
) -> None:
    """The like-for-like part of a row: our top 10 against exhaustive scoring, pyserini's index of
    the same passages at ``lucene`` (built from ``corpus``, a jsonl file, or a function writing a
    scratch one that is removed after the build; reused with ``--keep``), both engines in
    alternated rounds, the top-10 overlap, and the RESULT lines named after ``row``."""
    ids = [p.id for p in index.passages]
    fns: dict[str, Callable[[], object]] = {"prm bm25": lambda: [index.rank(q, 10) for q in queries]}
    same = sum(
        (lambda got, want: got[0].tolist() == want[0] and got[1].tolist() == want[1])(
            index.rank(q, 10), exhaustive(index, q, 10)
        )
        for q in queries[: args.check]
    )
    print(f"top-10 (ids and scores) identical to exhaustive scoring: {same}/{min(args.check, len(queries))} queries")
    searcher = None
    missing = [m for m in ("pyserini", "jnius") if importlib.util.find_spec(m) is None]
    if missing or args.no_pyserini:
        print("pyserini   " + ("not asked for (--no-pyserini)" if args.no_pyserini else
              f"not installed ({', '.join(missing)}; pip install 'prm-gym[pyserini]')") + ": skipped")  # fmt: skip
    else:
        from prm_gym.envs.search.index.pyserini_backend import PyseriniRetriever, build_lucene_index

        if args.keep and (lucene / "prm-built.ok").exists():
            print(f"pyserini   index reused from {lucene}")
        else:
            where = corpus if isinstance(corpus, Path) else corpus()
            t = time.perf_counter()
            build_lucene_index(where, lucene, threads=2)
            print(f"pyserini   build {time.perf_counter() - t:6.1f}s (2 indexing threads)")
            if not isinstance(corpus, Path):
                shutil.rmtree(where.parent, ignore_errors=True)
            (lucene / "prm-built.ok").touch()
        searcher = PyseriniRetriever(lucene, threads=1)
        fns["pyserini"] = lambda: searcher.search_batch(queries, 10)
    times, cpu_times = alternate(fns, args.reps)
    ms = {name: [s / len(queries) * 1e3 for s in ts] for name, ts in times.items()}
    cpu = {name: [s / len(queries) * 1e3 for s in ts] for name, ts in cpu_times.items()}
    for name, vals in ms.items():
        print(f"{name:<10} {statistics.median(vals):7.3f} ms/query wall (min {min(vals):.3f}, max {max(vals):.3f}), "
              f"{statistics.median(cpu[name]):7.3f} ms/query CPU (min {min(cpu[name]):.3f})")  # fmt: skip
    if searcher is not None:
        ranked = [index.rank(q, 10) for q in queries]
        mine = [[ids[i] for i in got[0].tolist()] for got in ranked]
        hits = searcher.search_batch(queries, 10)
        theirs = [[p.id for p in h] for h in hits]
        overlap = statistics.mean(len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(mine, theirs, strict=True))
        differ = [i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if set(a) != set(b)]
        ties = sum(
            len(ranked[i][1]) == len(hits[i]) and np.allclose(ranked[i][1], [p.score for p in hits[i]], rtol=1e-5)
            for i in differ
        )
        print(f"top-10 overlap with pyserini: {overlap:.3f} ({len(differ)}/{len(queries)} queries with other ids; "
              f"{ties} of them with the same 10 scores, i.e. ties cut differently)")  # fmt: skip
        med = statistics.median
        emit("bm25_scale", f"BM25 ms/query, k=10, {row} (vs Lucene)", med(ms["prm bm25"]), med(ms["pyserini"]),
             cond, "ms/query", "lower",
             f"ours {spread(ms['prm bm25'])}, pyserini {spread(ms['pyserini'])}; overlap@10 {overlap:.3f}, "
             f"identical to exhaustive {same}/{min(args.check, len(queries))}")  # fmt: skip
        emit("bm25_scale", f"BM25 CPU ms/query, k=10, {row} (vs Lucene)", med(cpu["prm bm25"]),
             med(cpu["pyserini"]), cond + "; CPU time of the process (the JVM's threads included)", "ms/query",
             "lower", f"ours {spread(cpu['prm bm25'])}, pyserini {spread(cpu['pyserini'])}")  # fmt: skip
        searcher.close()
    print(f"peak resident memory of this process so far: {peak_rss_mib():,.0f} MiB (pyserini's JVM included)")


class _Ids(Sequence[Passage]):
    """The passages of a generated corpus by index, made on demand (ids only; no text kept)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # type: ignore[no-untyped-def,unused-ignore]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)  # (iteration stops here)
        return Passage(f"p{i % self.n:08d}", "", "")


def id_chunks(n: int, args: argparse.Namespace) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """The corpus as chunks of ``(word ranks, lengths)``, drawn again identically on every call."""

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for c, lo in enumerate(range(0, n, 250_000)):
            rng = np.random.default_rng([n, c])
            lengths = rng.integers(args.words[0], args.words[1] + 1, min(250_000, n - lo))
            yield zipf_sampler(args.vocab, args.exponent, rng)(int(lengths.sum())).astype(np.int32), lengths

    return chunks


def index_from_ids(n: int, args: argparse.Namespace) -> tuple[BM25Index, float]:
    """Our index of :func:`id_chunks` built from the word ranks in chunks (the same index the
    text would give: the words are unchanged by the analyzer), and its build seconds."""
    t = time.perf_counter()
    chunks = id_chunks(n, args)
    lengths = [ln for _, ln in chunks()]
    arrays = postings_in_chunks(chunks, args.vocab)
    vocab = {f"w{r}": r for r in range(args.vocab)}
    params = {"k1": 0.9, "b": 0.4, "avgdl": bm25_avgdl(np.concatenate(lengths))}
    return BM25Index(_Ids(n), vocab, *arrays, Analyzer("none"), params).warm(), time.perf_counter() - t


def write_id_corpus(n: int, args: argparse.Namespace, path: Path) -> Path:
    """:func:`id_chunks` as a jsonl corpus of text, for pyserini."""
    words = [f"w{r}" for r in range(args.vocab)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        base = 0
        for ranks, lengths in id_chunks(n, args)():
            at, rl = 0, ranks.tolist()
            for i, ln in enumerate(lengths.tolist()):
                text = " ".join([words[r] for r in rl[at : at + ln]])
                fh.write(json.dumps({"id": f"p{base + i:08d}", "contents": text}) + "\n")
                at += ln
            base += len(lengths)
    return path


def id_queries(n: int, args: argparse.Namespace) -> list[str]:
    rng = np.random.default_rng(n + 1)
    draw = zipf_sampler(args.vocab, args.exponent, rng)
    qlens = rng.choice(QUERY_LENGTHS, args.queries, p=QUERY_LENGTH_P)
    return [" ".join(f"w{r}" for r in draw(int(m)).tolist()) for m in qlens]


def passage_queries(
    n: int,
    args: argparse.Namespace,
    passages: Sequence[Passage],
    pool: int = 250_000,
    split: Callable[[str], list[str]] = str.split,
) -> list[str]:
    """Keyword queries drawn from passages: per query a random passage (of the first ``pool``) and
    3-8 of its distinct words, by ``split`` (P as :data:`QUERY_LENGTH_P`), so each query's words occur together."""
    rng = np.random.default_rng(n + 2)
    sizes = rng.choice(QUERY_LENGTHS, args.queries, p=QUERY_LENGTH_P).tolist()
    picks = rng.integers(min(n, pool), size=args.queries).tolist()
    if passages:
        bags = [split(passages[i].text) for i in picks]
    else:
        ranks, lengths = next(iter(id_chunks(n, args)()))
        ends = np.cumsum(lengths)
        bags = [[f"w{r}" for r in ranks[ends[i] - lengths[i] : ends[i]].tolist()] for i in picks]
    out = []
    for m, bag in zip(sizes, bags, strict=True):
        words = sorted(set(bag))
        out.append(" ".join(rng.choice(words, min(m, len(words)), replace=False).tolist()))
    return out


def big_row(n: int, args: argparse.Namespace) -> None:
    """Our index alone on ``n`` generated passages, built from term ids in chunks (no text, no
    pyserini: its index build at this size is out of this machine's budget)."""
    index, build = index_from_ids(n, args)
    queries = passage_queries(n, args, []) if args.query_from == "passages" else id_queries(n, args)
    gib = index_bytes(index) / 2**30, index.blockmax.nbytes / 2**30
    print(f"\n{n} passages (ours only), {len(index.doc_ids)} postings, built from term ids in chunks in "
          f"{build:.0f}s; index arrays {gib[0]:.2f} GiB (block tables {gib[1]:.2f} GiB)")  # fmt: skip
    same = sum(
        (lambda got, want: got[0].tolist() == want[0] and got[1].tolist() == want[1])(
            index.rank(q, 10), exhaustive(index, q, 10)
        )
        for q in queries[: args.check // 4]
    )
    print(f"top-10 (ids and scores) identical to exhaustive scoring: {same}/{min(args.check // 4, len(queries))}")
    wall, cpu = alternate({"prm bm25": lambda: [index.rank(q, 10) for q in queries]}, args.reps)
    ms, cms = ([s / len(queries) * 1e3 for s in x["prm bm25"]] for x in (wall, cpu))
    print(f"prm bm25   {statistics.median(ms):7.3f} ms/query wall (min {min(ms):.3f}, max {max(ms):.3f}), "
          f"{statistics.median(cms):7.3f} ms/query CPU; {len(queries)} queries, k=10, 1 thread")  # fmt: skip
    print(f"peak resident memory of this process: {peak_rss_mib():,.0f} MiB")


def real_words(text: str) -> list[str]:
    """The words of real text for a query: runs of letters, lower-cased (no punctuation, no numbers)."""
    return re.findall(r"[^\W\d_]+", text.lower())


def corpus_row(args: argparse.Namespace, tmp: Path) -> None:
    """The like-for-like row on a jsonl corpus of real text (``--corpus``, e.g. the dictionaries of
    ``benchmarks/real_text_corpus.py``): ours is the index the Search env opens on a ``.jsonl``
    corpus with ``backend="bm25"`` (``open_retriever``: built in memory with our Lucene-like English
    analyzer), pyserini's is built from the same file with its default analyzer. Queries: 3-8
    distinct words (letters only, lower-cased, stopwords kept: both analyzers drop them) of a
    random passage of the whole corpus."""
    path = Path(args.corpus)
    t = time.perf_counter()
    index = open_retriever("bm25", str(path))
    build = time.perf_counter() - t
    assert isinstance(index, BM25Index)
    n = len(index)
    queries = passage_queries(n, args, index.passages, pool=n, split=real_words)
    print(f"\n{path} ({path.stat().st_size / 2**20:,.0f} MiB): {n} passages, {len(index.vocab)} terms, "
          f"{len(index.doc_ids)} postings; {len(queries)} queries (3-8 words of random passages), k=10, 1 thread, "
          f"{args.reps} alternated rounds")  # fmt: skip
    mib = index_bytes(index) / 2**20, index.blockmax.nbytes / 2**20
    print(f"prm bm25   build {build:6.1f}s (open_retriever('bm25', corpus), analyzer {index.analyzer.name})   "
          f"index arrays {mib[0]:,.0f} MiB (block tables {mib[1]:,.0f} MiB)")  # fmt: skip
    stat = path.stat()
    cond = (
        f"pyserini/Lucene (default analyzer), 1 thread each, same {len(queries)} queries of 3-8 words of random "
        f"passages; real-text corpus {path.name} ({n:,} passages, our analyzer vs Lucene's), alternated rounds"
    )
    lucene = tmp / f"l{path.stem}-{stat.st_size}-{stat.st_mtime_ns}"
    compare(index, queries, args, lucene, path, f"{n:,} real-text passages ({path.stem})", cond)


def corpus_tag(args: argparse.Namespace) -> str:
    """The row name's mark of a corpus other than the first documented one (1M words, 80-120)."""
    tag = "" if args.query_from == "law" else ", queries from passages"
    if args.vocab == 1_000_000 and args.words == (80, 120) and args.exponent == 1.05:
        return tag
    return f", {args.vocab:,}-word vocabulary, {args.words[0]}-{args.words[1]} words{tag}"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated corpus sizes (passages)")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--vocab", default="1000000", help="comma-separated vocabulary sizes: one corpus each")
    ap.add_argument("--exponent", "--zipf", type=float, default=1.05, help="the Zipf exponent of word ranks")
    ap.add_argument("--words", default="80-120", help="passage lengths, drawn uniformly from LO-HI words")
    ap.add_argument("--big", type=int, default=0, help="passages of a row with our index alone (0: skip)")
    ap.add_argument("--from-ids", action="store_true", help="build ours from word ranks in chunks (fast, lean)")
    ap.add_argument("--check", type=int, default=100, help="queries checked against exhaustive scoring")
    ap.add_argument("--query-from", choices=("law", "passages"), default="law",
                    help="queries of words drawn from the Zipf law, or distinct words of random passages")  # fmt: skip
    ap.add_argument("--keep", default="", help="folder for pyserini's corpus and index, reused when present")
    ap.add_argument("--corpus", default="", help="a jsonl corpus of real text: its row instead of the Zipf ones")
    ap.add_argument("--no-pyserini", action="store_true", help="measure ours alone")
    args = ap.parse_args()
    lo, _, hi = args.words.partition("-")
    args.words = (int(lo), int(hi or lo))
    print(f"load average: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.corpus:
        with tempfile.TemporaryDirectory() as tmp:
            corpus_row(args, Path(args.keep or tmp))
        print(f"load average: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    for vocab in (int(v) for v in args.vocab.split(",") if v):
        args.vocab = vocab
        print(f"\n== corpus: Zipf exponent {args.exponent} over {vocab:,} words, {args.words[0]}-{args.words[1]} "
              f"words a passage ==")  # fmt: skip
        if args.big:
            big_row(args.big, args)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            for n in (int(x) for x in args.sizes.split(",") if x):
                one_size(n, args, Path(args.keep or tmp))
        print(f"load average: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
