"""The embedded retrieval backend: a BM25 inverted index in numpy, saved to and loaded from disk.

Why our own ~200 lines instead of a library: the env needs (1) Lucene's exact BM25 variant
(k1=0.9, b=0.4, Lucene's idf and its lossy one-byte document-length norms) so rankings agree
with pyserini, (2) thread-safe concurrent queries for the retrieval server, and (3) no
dependency beyond numpy (PyStemmer, optional, stems). bm25s is close on (1) but keeps a
tokenizer vocabulary that is awkward to share across threads, and tantivy adds a Rust wheel
whose scoring is not Lucene's. ``benchmarks/bench_search.py`` measures this index against
bm25s and pyserini side by side.

Scores are precomputed per posting ("impact" = idf * tf-saturation), stored in CSR layout by
term, so a query is a few vectorised gathers and one partial sort.

Build one from the command line::

    python -m prm_gym.envs.search_index.bm25 --corpus corpus.jsonl --index runs/index
"""

from __future__ import annotations

import argparse
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from prm_gym.core.errors import ConfigError
from prm_gym.core.progress import track
from prm_gym.envs.search_index.analyzer import Analyzer
from prm_gym.envs.search_index.protocol import Passage, check_query, read_corpus, read_index_meta, save_index_dir

FORMAT = "prm-bm25/1"
_FREE = 24  # Lucene SmallFloat: lengths below this are stored exactly
_DENSE_BUDGET = 64 << 20  # bytes of dense score rows kept for the most frequent terms


def lucene_norm_length(lengths: np.ndarray) -> np.ndarray:
    """Document lengths as Lucene stores them: one byte, exact below 24, 4-bit mantissa above."""
    x = np.asarray(lengths, dtype=np.int64)
    out = x.copy()
    big = x >= _FREE
    v = x[big] - _FREE
    bits = np.floor(np.log2(np.maximum(v, 1))).astype(np.int64) + 1  # bit length
    shift = np.maximum(bits - 4, 0)
    mant = v >> shift  # keeps the 4 most significant bits
    out[big] = _FREE + np.where(bits < 4, v, mant << shift)
    return out


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest positive scores, best first, ties by lower index (as Lucene).

    BM25 gives many tied scores, on which ``argpartition`` is slow; instead a falling
    threshold keeps the few scores near the top, and tied groups are taken whole in index order.
    """
    if len(scores) == 0 or (top := float(scores.max())) <= 0:
        return np.zeros(0, np.int64)
    thr = 0.0
    if len(scores) > 4096:
        for frac in (0.75, 0.5, 0.3, 0.15, 0.05):
            if np.count_nonzero(scores >= top * frac) >= k:
                thr = top * frac
                break
    idx = np.flatnonzero(scores >= thr) if thr > 0 else np.flatnonzero(scores > 0)
    vals = scores[idx]
    if len(idx) <= 4096:
        return idx[np.lexsort((idx, -vals))[:k]]
    out: list[np.ndarray] = []
    taken = 0
    while taken < k and len(vals):  # one distinct score per pass, best first
        eq = vals == vals.max()
        group = idx[eq][: k - taken]
        out.append(group)
        taken += len(group)
        idx, vals = idx[~eq], vals[~eq]
    return np.concatenate(out) if out else np.zeros(0, np.int64)


class BM25Index:
    """An in-memory BM25 index over passages; implements :class:`Retriever`.

    Build with :meth:`build`, persist with :meth:`save`, reopen with :meth:`load`.
    """

    name = "bm25"

    def __init__(
        self,
        passages: Sequence[Passage],
        vocab: dict[str, int],
        indptr: np.ndarray,
        doc_ids: np.ndarray,
        impacts: np.ndarray,
        analyzer: Analyzer,
        params: dict[str, float],
    ):
        self.passages = list(passages)
        self.vocab = vocab
        self.indptr, self.doc_ids, self.impacts = indptr, doc_ids, impacts
        self.analyzer = analyzer
        self.params = params
        self._max_impact: np.ndarray | None = None
        self._dense: dict[int, np.ndarray] | None = None
        #: Threads :meth:`search_batch` spreads a batch over (numpy releases the GIL in the scoring).
        self.threads = 1
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._pool_lock = threading.Lock()
        self._local = threading.local()  # per thread: a "seen" mask over the documents

    def __len__(self) -> int:
        return len(self.passages)

    @classmethod
    def build(
        cls,
        passages: Iterable[Passage],
        *,
        k1: float = 0.9,
        b: float = 0.4,
        stemmer: str = "porter",
    ) -> BM25Index:
        """Index ``passages`` (their ``contents``: quoted title, newline, text).

        Passages are stored sorted by id, so that equal scores rank by id as in Anserini/pyserini
        (which sorts ties by the id string); templated corpora have many ties at the top-k cut.
        """
        docs = sorted(passages, key=lambda p: p.id)
        if not docs:
            raise ConfigError("cannot build a BM25 index from an empty corpus.")
        analyzer = Analyzer(stemmer)
        vocab: dict[str, int] = {}
        term_ids: list[int] = []
        lengths = np.zeros(len(docs), dtype=np.int64)
        for d, psg in enumerate(track(docs, desc="BM25 index", unit="doc")):
            toks = analyzer(psg.contents)
            lengths[d] = len(toks)
            term_ids.extend(vocab.setdefault(t, len(vocab)) for t in toks)
        n = len(docs)
        doc_of_tok = np.repeat(np.arange(n, dtype=np.int64), lengths)
        keys, tf = np.unique(np.asarray(term_ids, dtype=np.int64) * n + doc_of_tok, return_counts=True)
        terms, doc_ids = keys // n, (keys % n).astype(np.int32)
        df = np.bincount(terms, minlength=len(vocab))
        indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
        avgdl = max(float(lengths.sum()) / n, 1e-9)
        norm = (k1 * ((1 - b) + b * lucene_norm_length(lengths) / avgdl)).astype(np.float32)
        tf32 = tf.astype(np.float32)
        impacts = idf[terms] * tf32 / (tf32 + norm[doc_ids])
        params = {"k1": k1, "b": b, "avgdl": avgdl}
        return cls(docs, vocab, indptr, doc_ids, impacts.astype(np.float32), analyzer, params)

    @classmethod
    def from_corpus(cls, path: str | Path, **kwargs: float | str) -> BM25Index:
        """Build from a jsonl corpus (``{"id","contents"}`` or ``{"id","title","text"}``)."""
        return cls.build(read_corpus(path), **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write the index to ``directory`` atomically (a temporary sibling, then a rename)."""
        terms = np.array(sorted(self.vocab, key=self.vocab.__getitem__), dtype=str)
        meta = {"format": FORMAT, "analyzer": self.analyzer.stemmer, "docs": len(self), **self.params}

        def arrays(tmp: Path) -> None:
            np.savez(tmp / "index.npz", indptr=self.indptr, doc_ids=self.doc_ids, impacts=self.impacts, terms=terms)

        return save_index_dir(directory, self.passages, meta, arrays)

    @classmethod
    def load(cls, directory: str | Path) -> BM25Index:
        """Open an index written by :meth:`save`.

        Raises:
            ConfigError: the directory is missing or not a BM25 index; the message says how to
                build one.
        """
        d = Path(directory)
        meta, _ = read_index_meta(d, "BM25", "prm_gym.envs.search_index.bm25", FORMAT)
        with np.load(d / "index.npz", allow_pickle=False) as z:
            indptr, doc_ids, impacts, terms = z["indptr"], z["doc_ids"], z["impacts"], z["terms"]
        vocab = {str(t): i for i, t in enumerate(terms.tolist())}
        passages = list(read_corpus(d / "passages.jsonl"))
        params = {k: float(meta[k]) for k in ("k1", "b", "avgdl")}
        return cls(passages, vocab, indptr, doc_ids, impacts, Analyzer(str(meta["analyzer"])), params)

    # ------------------------------------------------------------------ search
    def rank(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Doc indices and scores of the top ``k`` for an already-checked query.

        Exact top-k with a MaxScore-style shortcut: the documents of the query's rarest terms
        are gathered first, each scored once with every query term; once the other terms'
        summed upper bounds cannot lift any other document past the k-th score found, those
        candidates hold the answer. Otherwise every posting is scored.
        """
        tids = [t for t in (self.vocab.get(tok) for tok in self.analyzer(query)) if t is not None]
        if not tids:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        weight = Counter(tids)  # a repeated query word counts as often as it is repeated (Lucene)
        by_df = sorted(weight, key=lambda t: int(self.indptr[t + 1] - self.indptr[t]))
        ub = self.max_impact
        limit = max(256, len(self.passages) // 32)
        seen = self._seen_mask()
        cands: list[np.ndarray] = []
        parts: list[np.ndarray] = []
        total = 0
        try:
            for j, t in enumerate(by_df):  # essential terms: the rarest ones
                docs = self._docs(t)
                if total + len(docs) > limit:
                    break
                new = docs[~seen[docs]]
                seen[new] = True
                cands.append(new)
                parts.append(self._score_docs(tids, new))
                total += len(new)
                if total < k:
                    continue
                scores = np.concatenate(parts) if len(parts) > 1 else parts[0]
                bound = float(sum(weight[u] * ub[u] for u in by_df[j + 1 :]))  # what the rest could add
                if bound < float(np.partition(scores, total - k)[total - k]):
                    cand = np.concatenate(cands) if len(cands) > 1 else cands[0]
                    top = np.lexsort((cand, -scores))[:k]  # ties by lower index, as Lucene
                    return cand[top].astype(np.int64), scores[top]
        finally:
            for c in cands:
                seen[c] = False
        return self._rank_all(tids, k)

    def _seen_mask(self) -> np.ndarray:
        mask: np.ndarray | None = getattr(self._local, "seen", None)
        if mask is None or len(mask) != len(self.passages):
            mask = self._local.seen = np.zeros(len(self.passages), dtype=bool)
        return mask

    @property
    def max_impact(self) -> np.ndarray:
        """Per term, the largest impact in its posting list (its MaxScore upper bound)."""
        if self._max_impact is None:
            starts = self.indptr[:-1]
            self._max_impact = np.maximum.reduceat(self.impacts, starts).astype(np.float32)
        return self._max_impact

    @property
    def dense_rows(self) -> dict[int, np.ndarray]:
        """Dense score rows of the most frequent terms (one vector add instead of a scatter)."""
        if self._dense is None:
            n = len(self.passages)
            df = np.diff(self.indptr)
            frequent = np.argsort(-df)[: max(0, _DENSE_BUDGET // (4 * n))]
            self._dense = {}
            for t in frequent[df[frequent] >= n // 8].tolist():
                row = np.zeros(n, dtype=np.float32)
                row[self._docs(t)] = self.impacts[self.indptr[t] : self.indptr[t + 1]]
                self._dense[t] = row
        return self._dense

    def _docs(self, t: int) -> np.ndarray:
        return self.doc_ids[self.indptr[t] : self.indptr[t + 1]]

    def _score_docs(self, tids: Sequence[int], cand: np.ndarray) -> np.ndarray:
        """Exact scores of the doc indices ``cand`` (any order), the terms added in ``tids`` order."""
        scores = np.zeros(len(cand), dtype=np.float32)
        dense = self.dense_rows
        for t in tids:
            row = dense.get(t)
            if row is not None:
                scores += row[cand]
                continue
            s, e = self.indptr[t], self.indptr[t + 1]
            docs = self.doc_ids[s:e]
            pos = np.minimum(np.searchsorted(docs, cand), len(docs) - 1)
            hit = docs[pos] == cand
            scores[hit] += self.impacts[s + pos[hit]]
        return scores

    def _rank_all(self, tids: Sequence[int], k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = np.zeros(len(self.passages), dtype=np.float32)
        dense = self.dense_rows
        for t in tids:
            row = dense.get(t)
            if row is not None:
                scores += row
                continue
            s, e = self.indptr[t], self.indptr[t + 1]
            scores[self.doc_ids[s:e]] += self.impacts[s:e]
        top = _top_k(scores, k)
        return top, scores[top]

    def warm(self) -> BM25Index:
        """Precompute the lazy query-time tables (upper bounds, dense rows); returns self."""
        _ = self.max_impact, self.dense_rows
        return self

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self._passages(check_query(query, k), k)

    def _passages(self, q: str, k: int) -> list[Passage]:
        idx, sc = self.rank(q, k)
        out = []
        for i, s in zip(idx.tolist(), sc.tolist(), strict=True):
            p = self.passages[i]
            out.append(Passage(p.id, p.title, p.text, float(s)))
        return out

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        """:meth:`search` for every query, spread over :attr:`threads` threads when above 1."""
        qs = [check_query(q, k) for q in queries]  # every query is checked before any is searched
        if self.threads <= 1 or len(qs) < 2:
            return [self._passages(q, k) for q in qs]
        chunk = -(-len(qs) // (self.threads * 4))
        pieces = [qs[i : i + chunk] for i in range(0, len(qs), chunk)]
        done = self._executor().map(lambda part: [self._passages(q, k) for q in part], pieces)
        return [hits for part in done for hits in part]

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None or self._pool_size != self.threads:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="bm25")
                self._pool_size = self.threads
            return self._pool

    def close(self) -> None:
        """Stop the batch threads, if any (a later batch starts them again; the index stays usable)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m prm_gym.envs.search_index.bm25 --corpus C --index DIR``: build and save an index."""
    ap = argparse.ArgumentParser(description="Build an embedded BM25 index from a jsonl corpus.")
    ap.add_argument("--corpus", required=True, help='jsonl with {"id","contents"} or {"id","title","text"}')
    ap.add_argument("--index", required=True, help="output directory")
    ap.add_argument("--k1", type=float, default=0.9)
    ap.add_argument("--b", type=float, default=0.4)
    ap.add_argument("--stemmer", default="porter", help="porter (as Lucene), english, or none")
    args = ap.parse_args(argv)
    index = BM25Index.from_corpus(args.corpus, k1=args.k1, b=args.b, stemmer=args.stemmer)
    print(f"indexed {len(index)} passages, {len(index.vocab)} terms -> {index.save(args.index)}")


if __name__ == "__main__":
    main()
