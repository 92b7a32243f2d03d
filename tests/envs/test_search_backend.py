"""prm/Search-v0's ``backend="auto"``: the in-process index below the measured crossover, pyserini
(Lucene) past it when installed, and one line saying which and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from prm_gym.envs.search import env as search_env
from prm_gym.envs.search.env import PYSERINI_FROM, SearchEnv, choose_bm25_engine
from prm_gym.envs.search.index import BM25Index, write_corpus
from prm_gym.envs.search.tasks import generate_world, world_passages


def test_below_the_crossover_the_in_process_index_with_or_without_pyserini() -> None:
    for installed in (True, False):
        kind, line = choose_bm25_engine(10_000, installed)
        assert kind == "bm25"
        assert "in-process" in line and f"{PYSERINI_FROM:,}" in line and "\n" not in line


def test_past_the_crossover_pyserini_when_installed() -> None:
    kind, line = choose_bm25_engine(PYSERINI_FROM, True)
    assert kind == "pyserini"
    assert "pyserini (Lucene)" in line and "\n" not in line


def test_past_the_crossover_without_pyserini_says_what_installing_it_gains() -> None:
    kind, line = choose_bm25_engine(2 * PYSERINI_FROM, False)
    assert kind == "bm25"
    assert "pip install 'prm-gym[pyserini]'" in line and "measured" in line and "\n" not in line


def test_auto_on_a_small_corpus_opens_the_in_process_index_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(search_env, "_said", set())  # our own once-per-process memo
    passages = world_passages(generate_world(60, seed=1))
    corpus = write_corpus(passages, tmp_path / "corpus.jsonl")
    for loc in (corpus, BM25Index.build(passages).save(tmp_path / "idx")):
        env = SearchEnv(index=loc, world_people=60, world_seed=1, num_tasks=4)  # backend="auto" is the default
        assert isinstance(env.retriever, BM25Index)
        env.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"prm/Search-v0: BM25 in-process (numpy): {len(passages):,} passages, below the "
                   f"{PYSERINI_FROM:,} from which pyserini (Lucene) is faster"]  # fmt: skip


def test_an_explicit_backend_is_kept_and_says_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write_corpus(world_passages(generate_world(60, seed=1)), tmp_path / "corpus.jsonl")
    env = SearchEnv(index=corpus, backend="bm25", world_people=60, world_seed=1, num_tasks=4, pyserini_from=1)
    assert isinstance(env.retriever, BM25Index)
    assert capsys.readouterr().err == ""
    env.close()
