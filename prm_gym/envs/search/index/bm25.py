"""The embedded retrieval backend: a BM25 inverted index in numpy, saved to and loaded from disk.

Why our own ~200 lines instead of a library: the env needs (1) Lucene's exact BM25 variant
(k1=0.9, b=0.4, Lucene's idf and its lossy one-byte document-length norms) so rankings agree
with pyserini, (2) thread-safe concurrent queries for the retrieval server, and (3) no
dependency beyond numpy (PyStemmer, optional, stems). bm25s is close on (1) but keeps a
tokenizer vocabulary that is awkward to share across threads, and tantivy adds a Rust wheel
whose scoring is not Lucene's. ``benchmarks/bench_search.py`` measures this index against
bm25s and pyserini side by side.

Scores are precomputed per posting ("impact" = idf * tf-saturation), stored in CSR layout by
term with documents ascending; a query is exact top-k by block-max pruning (``blockmax.py``):
a few vectorised gathers over the blocks of documents that can still reach the top k.

Build one from the command line::

    python -m prm_gym.envs.search.index.bm25 --corpus corpus.jsonl --index runs/index
"""

from __future__ import annotations

import argparse
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from prm_gym.core.errors import ConfigError
from prm_gym.core.progress import track
from prm_gym.envs.search.index.analyzer import Analyzer
from prm_gym.envs.search.index.blockmax import BlockMax
from prm_gym.envs.search.index.protocol import Passage, check_query, read_corpus, read_index_meta, save_index_dir

FORMAT = "prm-bm25/2"  # 2: words of one or two letters are not stemmed (as Lucene)
_FREE = 24  # Lucene SmallFloat: lengths below this are stored exactly


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


def bm25_avgdl(lengths: np.ndarray) -> float:
    """The average document length BM25 normalises by."""
    return max(float(np.sum(lengths)) / max(len(lengths), 1), 1e-9)


def postings(
    term_ids: np.ndarray, lengths: np.ndarray, n_terms: int, k1: float = 0.9, b: float = 0.4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, doc_ids, impacts)``: the postings, CSR by term with documents ascending, of the
    documents whose term ids, concatenated in document order, are ``term_ids`` (``lengths[d]``
    of them for document ``d``); impacts are Lucene's BM25 with these ``k1`` and ``b``."""
    return postings_in_chunks(lambda: iter([(term_ids, lengths)]), n_terms, k1, b)


Chunk = tuple[np.ndarray, np.ndarray]


def _chunk_postings(term_ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(terms, local docs, tf)`` of one chunk, sorted by term then document."""
    n = len(lengths)
    keys, tf = np.unique(term_ids.astype(np.int64) * n + np.repeat(np.arange(n), lengths), return_counts=True)
    return keys // n, keys % n, tf


def postings_in_chunks(
    chunks: Callable[[], Iterator[Chunk]], n_terms: int, k1: float = 0.9, b: float = 0.4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`postings` of a corpus given as consecutive chunks of documents, in little memory.

    ``chunks()`` yields ``(term_ids, lengths)`` per chunk, the same chunks each time it is called:
    it is called twice, once to count the document frequencies and lengths, once to fill the
    postings in place. Memory: the postings (8 bytes each) plus one chunk's work.
    """
    df = np.zeros(n_terms, dtype=np.int64)
    all_lengths, first = [], None
    for i, (term_ids, lengths) in enumerate(chunks()):
        got = _chunk_postings(term_ids, lengths)
        df += np.bincount(got[0], minlength=n_terms)
        all_lengths.append(np.asarray(lengths, dtype=np.int64))
        first = got if i == 0 else None  # a single chunk is not worked twice
    lengths = np.concatenate(all_lengths)
    n = len(lengths)
    indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
    idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
    norm = (k1 * ((1 - b) + b * lucene_norm_length(lengths) / bm25_avgdl(lengths))).astype(np.float32)
    doc_ids = np.empty(int(indptr[-1]), dtype=np.int32)
    impacts = np.empty(int(indptr[-1]), dtype=np.float32)
    fill, base = indptr[:-1].copy(), 0
    again = iter([(np.zeros(0, np.int32), all_lengths[0])]) if first is not None else chunks()
    for term_ids, chunk_lengths in again:
        terms, local, tf = first if first is not None else _chunk_postings(term_ids, chunk_lengths)
        count = np.bincount(terms, minlength=n_terms)
        starts = np.concatenate([[0], np.cumsum(count)[:-1]])
        dest = fill[terms] + np.arange(len(terms)) - starts[terms]
        docs = local + base
        tf32 = tf.astype(np.float32)
        doc_ids[dest] = docs
        impacts[dest] = idf[terms] * tf32 / (tf32 + norm[docs])
        fill += count
        base += len(chunk_lengths)
    return indptr, doc_ids, impacts


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
        self.passages = passages if isinstance(passages, Sequence) else list(passages)
        self.vocab = vocab
        self.indptr, self.doc_ids, self.impacts = indptr, doc_ids, impacts
        self.analyzer = analyzer
        self.params = params
        self._blockmax: BlockMax | None = None
        #: Threads :meth:`search_batch` spreads a batch over (numpy releases the GIL in the scoring).
        self.threads = 1
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._pool_lock = threading.Lock()

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
        term_ids = array("i")
        lengths = np.zeros(len(docs), dtype=np.int64)
        for d, psg in enumerate(track(docs, desc="BM25 index", unit="doc")):
            toks = analyzer(psg.contents)
            lengths[d] = len(toks)
            term_ids.extend([vocab.setdefault(t, len(vocab)) for t in toks])
        arrays = postings(np.frombuffer(term_ids, dtype=np.int32), lengths, len(vocab), k1, b)
        return cls(docs, vocab, *arrays, analyzer, {"k1": k1, "b": b, "avgdl": bm25_avgdl(lengths)})

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
        meta, _ = read_index_meta(d, "BM25", "prm_gym.envs.search.index.bm25", FORMAT)
        with np.load(d / "index.npz", allow_pickle=False) as z:
            indptr, doc_ids, impacts, terms = z["indptr"], z["doc_ids"], z["impacts"], z["terms"]
        vocab = {str(t): i for i, t in enumerate(terms.tolist())}
        passages = list(read_corpus(d / "passages.jsonl"))
        params = {k: float(meta[k]) for k in ("k1", "b", "avgdl")}
        return cls(passages, vocab, indptr, doc_ids, impacts, Analyzer(str(meta["analyzer"])), params)

    # ------------------------------------------------------------------ search
    def rank(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Doc indices and scores of the top ``k`` for an already-checked query.

        Exact top-k by block-max pruning (:class:`~prm_gym.envs.search.index.blockmax.BlockMax`):
        only the blocks of documents whose summed per-term block maxima can still reach the
        k-th score are scored; never a pass over every document.
        """
        tids = [t for t in (self.vocab.get(tok) for tok in self.analyzer(query)) if t is not None]
        # a repeated query word counts as often as it is repeated (Lucene)
        return self.blockmax.top_k(tids, k)

    @property
    def blockmax(self) -> BlockMax:
        """The block maxima the queries prune with (built on first use, once)."""
        if self._blockmax is None:
            with self._pool_lock:
                if self._blockmax is None:
                    self._blockmax = BlockMax(self.indptr, self.doc_ids, self.impacts, len(self.passages))
        return self._blockmax

    def warm(self) -> BM25Index:
        """Build the lazy query-time tables (the block maxima) now; returns self."""
        _ = self.blockmax
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
    """``python -m prm_gym.envs.search.index.bm25 --corpus C --index DIR``: build and save an index."""
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
