"""The retrieval interface every backend implements, and the passage record it returns.

A backend answers ``search(query, k)`` with a ranked list of :class:`Passage` and
``search_batch(queries, k)`` with one list per query (the same lists ``search`` gives, unless the
backend sets ``batch_exact = False``: then a group's searches are not batched in process, and a
``RetrievalServer`` on it answers a batch request one ``search`` per query). Backends raise
:class:`prm_gym.core.errors.RetrievalError` when their infrastructure fails (a server
down or slow) and :class:`prm_gym.core.errors.ToolError` when the query itself is unusable; a bad
corpus file or a missing index directory is a :class:`prm_gym.core.errors.ConfigError` at construction.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from prm_gym.core.errors import ConfigError, ToolError
from prm_gym.core.tasks import read_jsonl

#: Longest query any backend accepts, in characters.
MAX_QUERY_CHARS = 1024
#: Most words a query may have (Google's limit): a query's cost grows with its terms, and an agent must
#: not be able to write one slow enough that a retrieval server misses its deadline, which is counted
#: as infrastructure. BM25 at 300k passages: the 32 most frequent words 112 ms, 146 of them 904 ms,
#: a typical 3-word query 29 ms.
MAX_QUERY_WORDS = 32
_WORD = re.compile(r"\w+")
#: Most passages one query may ask for.
MAX_K = 100


@dataclass(frozen=True)
class Passage:
    """One retrieved passage.

    Attributes:
        id: the corpus id.
        title: the title ("" when the corpus has none).
        text: the body text.
        score: the backend's score (higher is better).
    """

    id: str
    title: str
    text: str
    score: float = 0.0

    @property
    def contents(self) -> str:
        """Title and text in the pyserini / Search-R1 ``contents`` layout."""
        return f'"{self.title}"\n{self.text}' if self.title else self.text

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text, "contents": self.contents}


@runtime_checkable
class Retriever(Protocol):
    """A retrieval backend: the embedded BM25 index, pyserini, or an HTTP client."""

    name: str

    def search(self, query: str, k: int = 3) -> list[Passage]: ...

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]: ...

    def close(self) -> None: ...


def check_query(query: Any, k: Any) -> str:
    """The query stripped, or a :class:`ToolError` saying what is wrong with it or ``k``."""
    if not isinstance(query, str):
        raise ToolError(f"query must be a string, got {type(query).__name__}.")
    q = query.strip()
    if not q:
        raise ToolError("query is empty; search for a few keywords, e.g. the name you are looking for.")
    if len(q) > MAX_QUERY_CHARS:
        raise ToolError(f"query has {len(q)} characters; the limit is {MAX_QUERY_CHARS}. Use a few keywords.")
    words = len(_WORD.findall(q))  # the analyzer splits on punctuation too: "a,b,c" is three terms
    if words > MAX_QUERY_WORDS:
        raise ToolError(f"query has {words} words; the limit is {MAX_QUERY_WORDS}. Use a few keywords.")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ToolError(f"k must be an integer from 1 to {MAX_K}, got {k!r}.")
    return q


def split_contents(contents: str) -> tuple[str, str]:
    """``(title, text)`` of a pyserini ``contents`` string (``"Title"\\ntext``)."""
    head, sep, rest = contents.partition("\n")
    if sep and len(head) >= 2 and head.startswith('"') and head.endswith('"'):
        return head[1:-1], rest
    return "", contents


def passage_from_record(rec: dict[str, Any], where: str) -> Passage:
    """A passage from a corpus record: ``{"id","contents"}`` or ``{"id","title","text"}``."""
    if "id" not in rec and "docid" not in rec:
        raise ConfigError(f"{where}: missing field 'id' (fields present: {sorted(rec)[:10]}).")
    pid = str(rec.get("id", rec.get("docid")))
    if "text" in rec:
        return Passage(pid, str(rec.get("title", "")), str(rec["text"]))
    if "contents" in rec:
        title, text = split_contents(str(rec["contents"]))
        return Passage(pid, str(rec.get("title", title)), text)
    raise ConfigError(f"{where}: needs 'contents' or 'text' (fields present: {sorted(rec)[:10]}).")


def read_corpus(path: str | Path) -> Iterator[Passage]:
    """Passages of a jsonl corpus file; a :class:`ConfigError` names the first bad line."""
    for lineno, rec in read_jsonl(path, error=ConfigError, what="Corpus file"):
        yield passage_from_record(rec, f"{path}:{lineno}")


def read_index_meta(directory: Path, kind: str, builder: str, fmt: str) -> tuple[dict[str, Any], str]:
    """``(meta.json contents, how-to-build hint)`` of a saved index directory.

    Args:
        directory: the index directory.
        kind: its kind for messages ("BM25", "dense").
        builder: the module whose ``--corpus/--index`` command builds one.
        fmt: the ``format`` value meta.json must carry.

    Raises:
        ConfigError: the directory is missing, holds no index, or an index of another format;
            the message says how to build one.
    """
    how = f"build one with `python -m {builder} --corpus corpus.jsonl --index {directory}`"
    if not (directory / "meta.json").is_file():
        state = "does not exist" if not directory.exists() else f"holds no {kind} index (no meta.json)"
        raise ConfigError(f"{kind} index directory {str(directory)!r} {state}; {how}.")
    meta = json.loads((directory / "meta.json").read_text())
    if meta.get("format") != fmt:
        raise ConfigError(f"{directory}: index format {meta.get('format')!r} is not {fmt!r}; {how}.")
    return meta, how


def write_corpus(passages: Sequence[Passage], path: str | Path) -> Path:
    """Write ``passages`` as a ``{"id","title","text","contents"}`` jsonl corpus."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as fh:
        for psg in passages:
            fh.write(json.dumps(psg.to_dict(), ensure_ascii=False) + "\n")
    return p


def save_index_dir(
    directory: str | Path, passages: Sequence[Passage], meta: dict[str, Any], write_arrays: Callable[[Path], None]
) -> Path:
    """Write an index directory atomically and return it.

    ``write_arrays(tmp)`` writes the backend's arrays into a temporary sibling of ``directory``;
    the passages (``passages.jsonl``) and ``meta`` (``meta.json``) join them there, and one rename
    replaces ``directory``. A failure part-way removes the temporary folder and leaves an earlier
    index at ``directory`` untouched.
    """
    out = Path(directory)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_arrays(tmp)
        write_corpus(passages, tmp / "passages.jsonl")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
