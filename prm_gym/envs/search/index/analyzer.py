"""Text analysis shared by indexing and querying: tokenise, lower-case, drop stopwords, stem.

The chain imitates Lucene's English analysis as pyserini configures it (StandardTokenizer,
lower-casing, the possessive filter, Lucene's 33 English stopwords, the original Porter
stemmer, which leaves words of one or two letters as they are: PyStemmer would stem "s" to an
empty term and "us" to "u"), so the embedded index ranks like a pyserini Lucene index built from the same corpus.
Stemming uses PyStemmer's ``porter`` algorithm (C, part of the ``search`` extra); without
PyStemmer the analyzer does not stem and says so in its :attr:`Analyzer.name`.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from typing import Any

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``.
LUCENE_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)

# Runs of letters/digits, joined across an inner apostrophe or period ("don't", "3.5", "u.s").
_TOKEN_RE = re.compile(r"[^\W_]+(?:['’.][^\W_]+)*")


class Analyzer:
    """Callable text analyzer: ``analyzer(text) -> list[str]`` of index terms.

    Args:
        stemmer: a PyStemmer algorithm (``"porter"`` as Lucene, ``"english"`` for Porter2) or
            ``"none"``.
        stopwords: terms dropped after lower-casing; Lucene's English set by default.
    """

    def __init__(self, stemmer: str = "porter", stopwords: frozenset[str] = LUCENE_STOPWORDS):
        self.stopwords = stopwords
        self._stem: Any = None
        if stemmer != "none":
            try:
                import Stemmer  # PyStemmer
            except ImportError:
                stemmer = "none"
            else:
                self._stem = Stemmer.Stemmer(stemmer)
                self._stem.maxCacheSize = 200_000
        self.stemmer = stemmer
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()  # PyStemmer objects are not thread-safe

    @property
    def name(self) -> str:
        """What an index records to check that queries are analysed the same way."""
        return f"lucene-en/{self.stemmer}/{len(self.stopwords)}"

    def tokens(self, text: str) -> list[str]:
        """Lower-cased tokens without stopwords or possessives, before stemming."""
        text = unicodedata.normalize("NFKC", text).lower()
        out = []
        for tok in _TOKEN_RE.findall(text):
            if tok.endswith(("'s", "’s")):
                tok = tok[:-2]
            if tok and tok not in self.stopwords:
                out.append(tok)
        return out

    def __call__(self, text: str) -> list[str]:
        toks = self.tokens(text)
        if self._stem is None:
            return toks
        cache = self._cache
        missing = [t for t in set(toks) if len(t) > 2 and t not in cache]
        if missing:
            with self._lock:
                stems = self._stem.stemWords(missing)
                if len(cache) > 500_000:
                    cache.clear()
                cache.update(zip(missing, stems, strict=True))
        return [t if len(t) <= 2 else cache.get(t) or self._stem_one(t) for t in toks]

    def _stem_one(self, tok: str) -> str:
        with self._lock:
            return str(self._stem.stemWord(tok))
