"""Retrieval backends for prm/Search: one small interface, several engines.

* :class:`BM25Index` (embedded default): numpy BM25 with Lucene's scoring, saved to disk.
* :class:`HTTPRetriever`: a client of ``python -m prm_gym.envs.search.index.server``, so many rollout
  workers share one index.
* ``prm_gym.envs.search.index.pyserini_backend``: Lucene through pyserini, an optional extra imported
  only when asked for.
* ``prm_gym.envs.search.index.dense``: all-MiniLM-L6-v2 embeddings with exact inner-product search
  (numpy, or faiss), an optional extra imported only when asked for.
"""

from __future__ import annotations

from prm_gym.envs.search.index.bm25 import BM25Index
from prm_gym.envs.search.index.client import HTTPRetriever
from prm_gym.envs.search.index.protocol import MAX_K, MAX_QUERY_CHARS, Passage, Retriever, read_corpus, write_corpus

__all__ = [
    "MAX_K",
    "MAX_QUERY_CHARS",
    "BM25Index",
    "HTTPRetriever",
    "Passage",
    "Retriever",
    "open_retriever",
    "read_corpus",
    "write_corpus",
]


def open_retriever(backend: str, location: str, **kwargs: object) -> Retriever:
    """A retriever by backend name: ``bm25`` or ``dense`` (an index directory, or a ``.jsonl``
    corpus to index in memory), ``http`` (a server URL) or ``pyserini`` (a Lucene index
    directory or a prebuilt index name). ``kwargs`` go to the backend (e.g. ``engine="faiss"``
    for ``dense``, ``k1``/``b`` for ``pyserini``, ``timeout_s`` for ``http``).

    Raises:
        ConfigError: unknown backend, missing index, or a missing optional extra.
    """
    from prm_gym.core.errors import ConfigError

    if backend == "bm25":
        if location.endswith(".jsonl"):
            return BM25Index.from_corpus(location).warm()
        return BM25Index.load(location).warm()
    if backend == "http":
        return HTTPRetriever(location, **kwargs)  # type: ignore[arg-type]
    if backend == "pyserini":
        from prm_gym.envs.search.index.pyserini_backend import PyseriniRetriever

        return PyseriniRetriever(location, **kwargs)  # type: ignore[arg-type]
    if backend == "dense":
        from prm_gym.envs.search.index.dense import DenseIndex

        if location.endswith(".jsonl"):
            return DenseIndex.from_corpus(location, **kwargs)  # type: ignore[arg-type]
        return DenseIndex.load(location, **kwargs)  # type: ignore[arg-type]
    raise ConfigError(f"unknown retrieval backend {backend!r}; use 'bm25', 'dense', 'http' or 'pyserini'.")
