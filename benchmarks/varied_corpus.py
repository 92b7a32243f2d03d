"""A seeded corpus with a Zipfian, varied vocabulary, for BM25 benchmarks that templates do not flatter.

The generated world of :mod:`prm_gym.envs.search.tasks` repeats a handful of sentence templates,
so its posting lists are few and very regular. This corpus draws every passage's words from a
vocabulary of invented words with Zipf-distributed frequencies (exponent ~1.07, as in English
text), passages of varied length, and a topic per passage that skews its word choice, so that
posting lengths span rare to very common terms as in a real collection. Queries are 2-8 words
drawn from one passage as often as they occur in it, so common words are common in queries too.
"""

from __future__ import annotations

import numpy as np

from prm_gym.envs.search.index import Passage

_ONSETS = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "st", "tr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
_CODAS = ["", "", "n", "r", "s", "l", "m", "nd", "st", "x"]


def _vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    out: list[str] = []
    while len(out) < size:
        n = int(rng.integers(1, 5))
        parts = rng.integers(0, [len(_ONSETS), len(_VOWELS), len(_CODAS)], size=(n, 3))
        word = "".join(_ONSETS[a] + _VOWELS[b] + _CODAS[c] for a, b, c in parts.tolist())
        if len(word) > 2 and word not in words:
            words.add(word)
            out.append(word)
    return out


def varied_corpus(
    n_passages: int = 100_000, n_queries: int = 2000, vocab: int = 200_000, seed: int = 0
) -> tuple[list[Passage], list[str]]:
    """``n_passages`` passages and ``n_queries`` queries over a Zipfian vocabulary of ``vocab`` words."""
    rng = np.random.default_rng([seed, 25])
    words = _vocabulary(vocab, rng)
    ranks = np.arange(1, vocab + 1, dtype=np.float64)
    weights = ranks**-1.07
    cdf = np.cumsum(weights / weights.sum())
    lengths = np.clip(rng.lognormal(4.2, 0.45, n_passages), 12, 400).astype(np.int64)
    topics = rng.integers(0, 500, n_passages)
    draws = np.searchsorted(cdf, rng.random(int(lengths.sum())))
    # a topic shifts a third of a passage's words to its own slice of the mid-frequency vocabulary
    shift = rng.random(len(draws)) < 0.33
    starts = np.repeat(1000 + np.repeat(topics, 1) * 300, lengths)
    draws[shift] = starts[shift] + np.searchsorted(cdf[:300] / cdf[299], rng.random(int(shift.sum())))
    passages, queries = [], []
    pos = 0
    for i, n in enumerate(lengths.tolist()):
        ids = draws[pos : pos + n]
        pos += n
        text = " ".join(words[j] for j in ids.tolist())
        passages.append(Passage(f"doc-{i:06d}", words[int(ids[0])].capitalize(), text.capitalize() + "."))
    picks = rng.integers(0, n_passages, n_queries)
    for p in picks.tolist():
        tokens = passages[p].text.rstrip(".").lower().split()
        k = int(rng.integers(2, 9))
        chosen = [tokens[int(j)] for j in rng.integers(0, len(tokens), k)]  # as often as they occur
        queries.append(" ".join(dict.fromkeys(chosen)))
    return passages, queries
