"""Exact top-k over an impact index by block-max pruning: numpy work per query, no per-posting loop.

The documents are cut into blocks of ``2**shift`` consecutive indices. For every term with at
least ``2**shift`` postings, :class:`BlockMax` keeps, per block the term occurs in, the term's
largest impact there (its block maximum) and how many postings it has there (one byte); the
postings are ordered by document, so a block's postings are one slice, found from those counts
without a search. Terms in half of the blocks or more also keep their block maxima as a dense row,
terms in a quarter of the documents or more a dense row of impacts, and every frequent term the
documents of its ``CHAMPIONS`` largest impacts. A query then

1. sums its terms' block maxima into one upper bound per block (a rarer term's maxima come from
   its few postings directly);
2. scores exactly the champions of its terms (a few dozen documents): their k-th best score is a
   first threshold, which drops blocks before any is scored;
3. scores exactly the blocks with the highest bounds first, in rounds that grow fourfold,
   keeping the ``k`` best documents so far; the k-th best score is the threshold;
4. after each round drops every block whose bound is below the threshold (no document in it can
   reach the top ``k``, not even to tie) and stops when no block is left.

Inside the scored blocks it is MaxScore: the query's terms of smallest bound whose bounds sum
below the threshold only look up the candidates the other terms' postings give.

The work per query is the bound pass (a vector add per frequent term over the blocks it occurs
in, ``1/2**shift`` of its postings) plus the postings of the blocks that survive, which shrink
as the corpus grows and the k-th score rises; nothing scores every document.

Exactness: a document's score is the float32 sum of its terms' impacts added term by term in
query order, from 0, exactly as a dense score vector ``scores[docs_of(t)] += impacts_of(t)`` for
``t`` in the query gives it; ties rank by the lower document index. The bounds carry a relative
slack (:data:`SLACK`) far above float32 rounding, so pruning never drops a document that the
exhaustive computation would rank in the top ``k``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

#: Relative margin on every block bound (float32 sums of a few terms err by about 1e-6).
SLACK = 1e-4
#: Terms in at least this share of the documents also keep a dense row of impacts.
DENSE_SHARE = 0.25
#: Blocks scored in the first round (more than ``k`` when ``k`` is larger); later rounds grow 4x.
FIRST_ROUND = 64
#: Per frequent term, the documents of its largest impacts kept to seed a query's threshold.
CHAMPIONS = 16

_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_F = np.zeros(0, np.float32)


class BlockMax:
    """Block maxima of the postings ``indptr / doc_ids / impacts`` (CSR by term, docs ascending).

    Args:
        indptr: per term, where its postings start (length ``terms + 1``).
        doc_ids: the postings' document indices, ascending within each term.
        impacts: the postings' score contributions (positive float32).
        n_docs: the number of documents.
        shift: log2 of the block size.
    """

    def __init__(self, indptr: np.ndarray, doc_ids: np.ndarray, impacts: np.ndarray, n_docs: int, shift: int = 7):
        self.indptr, self.doc_ids, self.impacts = indptr, doc_ids, impacts
        self.shift = shift
        self.n_blocks = (n_docs >> shift) + 1
        df = np.diff(indptr)
        self.min_df = 1 << shift
        heavy = np.flatnonzero(df >= self.min_df)
        # Per frequent term t: groups gptr[t] .. gptr[t+1]-1 are the blocks it occurs in,
        # ascending (block id, the term's largest impact in the block).
        blocks, maxima, champs, sizes = [], [], [], []
        counts = np.zeros(len(df), dtype=np.int64)
        for t in heavy.tolist():
            s, e = int(indptr[t]), int(indptr[t + 1])
            champs.append(np.sort(doc_ids[s:e][np.argpartition(impacts[s:e], -CHAMPIONS)[-CHAMPIONS:]]))
            blk = doc_ids[s:e] >> shift
            first = np.concatenate([[0], np.flatnonzero(np.diff(blk)) + 1])
            blocks.append(blk[first].astype(np.int32))
            maxima.append(np.maximum.reduceat(impacts[s:e], first).astype(np.float32))
            sizes.append(np.diff(np.append(first, e - s)).astype(np.uint8 if shift < 8 else np.int32))
            counts[t] = len(first)
        self.gptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.gblock = np.concatenate(blocks) if blocks else np.zeros(0, np.int32)
        self.gmax = np.concatenate(maxima) if maxima else np.zeros(0, np.float32)
        #: Per group, how many of the term's postings fall in the block (one byte: at most 2**shift).
        self.gsize = np.concatenate(sizes) if sizes else np.zeros(0, np.uint8)
        #: Per frequent term (in the order of ``heavy``), the documents of its CHAMPIONS largest impacts.
        self.champ_of = dict(zip(heavy.tolist(), range(len(champs)), strict=True))
        self.champs = np.stack(champs) if champs else np.zeros((0, CHAMPIONS), np.int32)
        # The commonest terms (in a quarter of the documents or more) also as dense rows of
        # impacts, one row per block: their postings in a block are then one contiguous slice.
        self.dense: dict[int, np.ndarray] = {}
        for t in np.flatnonzero(df >= max(n_docs * DENSE_SHARE, 4 << shift)).tolist():
            row = np.zeros(self.n_blocks << shift, dtype=np.float32)
            s, e = int(indptr[t]), int(indptr[t + 1])
            row[doc_ids[s:e]] = impacts[s:e]
            self.dense[t] = row.reshape(self.n_blocks, 1 << shift)
        self.dense_max = {t: row.max(axis=1) for t, row in self.dense.items()}
        # Terms in half of the blocks or more also keep their block maxima as one dense row (no
        # larger than their list of groups): a bound is then one gather, not a binary search.
        for t in np.flatnonzero(np.diff(self.gptr) * 2 >= self.n_blocks).tolist():
            if t not in self.dense_max:
                row = np.zeros(self.n_blocks, dtype=np.float32)
                a, b = int(self.gptr[t]), int(self.gptr[t + 1])
                row[self.gblock[a:b]] = self.gmax[a:b]
                self.dense_max[t] = row
        #: Per term, its largest impact (0 for a term without postings).
        self.term_max = np.zeros(len(df), dtype=np.float32)
        some = df > 0
        if some.any():
            self.term_max[some] = np.maximum.reduceat(impacts, indptr[:-1][some])

    @property
    def nbytes(self) -> int:
        """Memory the block tables take, in bytes (the postings themselves not counted)."""
        dense = sum(row.nbytes for row in self.dense.values()) + sum(r.nbytes for r in self.dense_max.values())
        tables = self.gptr.nbytes + self.gblock.nbytes + self.gmax.nbytes + self.gsize.nbytes + self.champs.nbytes
        return int(tables + dense)

    # ------------------------------------------------------------------ bounds
    def _maxima(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """``(blocks, maxima)`` of term ``t``: the blocks it occurs in, ascending, and its top impact in each."""
        a, b = int(self.gptr[t]), int(self.gptr[t + 1])
        if b > a:
            return self.gblock[a:b], self.gmax[a:b]
        s, e = int(self.indptr[t]), int(self.indptr[t + 1])
        if e == s:
            return _EMPTY_I, _EMPTY_F
        blk = self.doc_ids[s:e] >> self.shift
        first = np.concatenate([[0], np.flatnonzero(np.diff(blk)) + 1])
        return blk[first], np.maximum.reduceat(self.impacts[s:e], first)

    # ------------------------------------------------------------------ exact scoring of blocks
    def _gather(self, t: int, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(slots, impacts)`` of term ``t``'s postings in the blocks ``sel`` (ascending); a
        posting of document ``d`` in ``sel[r]`` lands in slot ``r * B + d % B``."""
        shift = self.shift
        a, b = int(self.gptr[t]), int(self.gptr[t + 1])
        if b > a:  # a frequent term: the selected blocks it occurs in, then their postings
            tb = self.gblock[a:b]
            pos = np.minimum(np.searchsorted(tb, sel.astype(tb.dtype)), len(tb) - 1)
            rank = np.flatnonzero(tb[pos] == sel)
            s, e = int(self.indptr[t]), int(self.indptr[t + 1])
            mine = self.doc_ids[s:e]
            g = pos[rank]  # the term's groups in the selected blocks; their postings are one slice each
            size = self.gsize[a:b]
            ln = size[g].astype(np.int64)
            st = np.cumsum(size, dtype=np.int64)[g] - ln
            total = int(ln.sum())
            if not total:
                return _EMPTY_I, _EMPTY_F
            ends = np.cumsum(ln)
            idx = np.repeat(st - (ends - ln), ln) + np.arange(total)
            docs = mine[idx].astype(np.int64)
            return docs + np.repeat((rank - sel[rank]) << shift, ln), self.impacts[s:e][idx]
        s, e = int(self.indptr[t]), int(self.indptr[t + 1])
        docs = self.doc_ids[s:e].astype(np.int64)
        blk = docs >> shift
        r = np.searchsorted(sel, blk)
        keep = sel[np.minimum(r, len(sel) - 1)] == blk
        return docs[keep] + ((r[keep] - blk[keep]) << shift), self.impacts[s:e][keep]

    def _lookup(self, t: int, docs: np.ndarray) -> np.ndarray:
        """Term ``t``'s impact in each of ``docs`` (ascending), 0 where it does not occur."""
        row = self.dense.get(t)
        if row is not None:
            return row.reshape(-1)[docs]
        s, e = int(self.indptr[t]), int(self.indptr[t + 1])
        if e == s:
            return np.zeros(len(docs), dtype=np.float32)
        mine = self.doc_ids[s:e]
        pos = np.minimum(np.searchsorted(mine, docs.astype(mine.dtype)), e - s - 1)
        return np.where(mine[pos] == docs, self.impacts[s:e][pos], np.float32(0))

    def _score_blocks(
        self, tids: Sequence[int], sel: np.ndarray, theta: float, mult: dict[int, int], top: dict[int, float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Documents in the blocks ``sel`` (ascending) that may score ``theta`` or more, with
        their exact scores (MaxScore inside the blocks).

        The query's terms of smallest bound whose bounds sum below ``theta`` are not essential:
        a document holding none of the other terms cannot reach it. The essential terms'
        postings in ``sel`` give the candidates and a partial score; each candidate's bound
        adds the other terms' block maxima, and only candidates whose bound reaches ``theta``
        are scored exactly, term by term in query order.
        """
        shift = self.shift
        rest: list[int] = []
        acc = 0.0
        for t in sorted(mult, key=top.__getitem__):
            acc += top[t]
            if acc * (1 + SLACK) >= theta:
                break
            rest.append(t)
        ess = [t for t in mult if t not in rest]
        known: dict[int, np.ndarray] = {}
        if len(ess) == 1 and ess[0] not in self.dense:  # one essential list: its postings are the candidates
            cand, imp = self._gather(ess[0], sel)  # slots ascending, impacts positive
            bound = np.float32(mult[ess[0]]) * imp
            known[ess[0]] = imp
        else:
            part = np.zeros(len(sel) << shift, dtype=np.float32)
            for t in ess:
                row = self.dense.get(t)
                if row is not None:
                    part += np.float32(mult[t]) * row[sel].ravel()
                else:
                    slots, imp = self._gather(t, sel)
                    part[slots] += np.float32(mult[t]) * imp
            cand = np.flatnonzero(part)
            bound = part[cand]
        if rest and len(cand):
            r = cand >> shift
            for t in rest:
                dmax = self.dense_max.get(t)
                if dmax is not None:
                    bound += np.float32(mult[t]) * dmax[sel[r]]
                    continue
                blk, mx = self._maxima(t)
                if not len(blk):
                    continue
                pos = np.minimum(np.searchsorted(blk, sel.astype(blk.dtype)), len(blk) - 1)
                in_sel = np.where(blk[pos] == sel, mx[pos], np.float32(0)) * np.float32(mult[t])
                bound += in_sel[r]
            ok = bound * np.float32(1 + SLACK) >= theta
            cand = cand[ok]
            known = {t: v[ok] for t, v in known.items()}
        docs = (sel[cand >> shift].astype(np.int64) << shift) + (cand & ((1 << shift) - 1))
        scores = np.zeros(len(docs), dtype=np.float32)
        if not len(docs):
            return docs, scores
        cache = known
        for t in tids:  # in query order, a repeated term once per occurrence: as scoring every document
            got = cache.get(t)
            if got is None:
                got = cache[t] = self._lookup(t, docs)
            scores += got
        return docs, scores

    def _seed(self, mult: dict[int, int]) -> np.ndarray:
        """The documents of each query term's largest impacts (its champions), ascending, unique."""
        parts = []
        for t in mult:
            c = self.champ_of.get(t)
            if c is not None:
                parts.append(self.champs[c])
                continue
            s, e = int(self.indptr[t]), int(self.indptr[t + 1])
            if e - s > CHAMPIONS:
                parts.append(self.doc_ids[s:e][np.argpartition(self.impacts[s:e], -CHAMPIONS)[-CHAMPIONS:]])
            else:
                parts.append(self.doc_ids[s:e])
        return np.unique(np.concatenate(parts)).astype(np.int64) if parts else _EMPTY_I

    def _exact(self, tids: Sequence[int], docs: np.ndarray) -> np.ndarray:
        """The exact scores of ``docs`` (ascending): impacts added term by term in query order."""
        scores = np.zeros(len(docs), dtype=np.float32)
        cache: dict[int, np.ndarray] = {}
        for t in tids:
            got = cache.get(t)
            if got is None:
                got = cache[t] = self._lookup(t, docs)
            scores += got
        return scores

    # ------------------------------------------------------------------ the query
    def top_k(self, tids: Sequence[int], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Document indices and scores of the ``k`` best documents for the query terms ``tids``
        (repeats count once per occurrence), best first, ties by lower index."""
        if not tids or k < 1:
            return _EMPTY_I, _EMPTY_F
        mult = dict(Counter(tids))
        bound = np.zeros(self.n_blocks, dtype=np.float32)
        top: dict[int, float] = {}
        for t, m in mult.items():
            top[t] = float(self.term_max[t]) * m
            row = self.dense_max.get(t)
            if row is not None:
                bound += np.float32(m) * row
                continue
            blk, mx = self._maxima(t)
            bound[blk] += np.float32(m) * mx
        bound *= np.float32(1 + SLACK)
        live = np.flatnonzero(bound)
        # A first threshold from a few documents scored exactly: each term's largest impacts.
        seed = self._seed(mult)
        best_d, best_s = _best(seed, self._exact(tids, seed), k)
        theta = np.float32(0)
        if len(best_d) >= k:
            theta = best_s[-1]
            live = live[bound[live] >= theta]
        size = max(FIRST_ROUND, k)
        while len(live):
            if len(live) > size:
                part = np.argpartition(-bound[live], size - 1)
                sel, live = np.sort(live[part[:size]]), live[part[size:]]
            else:
                sel, live = np.sort(live), live[:0]
            docs, scores = self._score_blocks(tids, sel, float(theta), mult, top)
            if len(docs) and len(seed):  # a seed document is in the best already, or out of them for good
                at = np.minimum(np.searchsorted(seed, docs), len(seed) - 1)
                fresh = seed[at] != docs
                docs, scores = docs[fresh], scores[fresh]
            if len(best_d) >= k:
                keep = scores >= theta
                docs, scores = docs[keep], scores[keep]
            best_d, best_s = _best(np.concatenate([best_d, docs]), np.concatenate([best_s, scores]), k)
            if len(best_d) >= k:
                theta = best_s[-1]
                live = live[bound[live] >= theta]
            size *= 4
        return best_d, best_s


def _best(docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``(docs, scores)``, best first, ties by lower document index."""
    if len(docs) > 4 * k:  # cut to the scores at or above the k-th largest (its ties kept)
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth
        docs, scores = docs[keep], scores[keep]
    order = np.lexsort((docs, -scores))[:k]
    return docs[order], scores[order]
