"""The embedded BM25 index: scoring, exact top-k, persistence, bad corpora and bad queries."""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from prm_gym.core.errors import ConfigError, ToolError
from prm_gym.envs.search.index import BM25Index, Passage, open_retriever, read_corpus, write_corpus
from prm_gym.envs.search.index.analyzer import Analyzer
from prm_gym.envs.search.index.bm25 import lucene_norm_length, postings, postings_in_chunks
from prm_gym.envs.search.tasks import generate_search_tasks, generate_world, world_passages


def _world_index(n: int = 200) -> tuple[BM25Index, list[Passage]]:
    passages = world_passages(generate_world(n, seed=1))
    return BM25Index.build(passages), passages


def test_analyzer_drops_stopwords_possessives_and_stems() -> None:
    a = Analyzer("porter")
    assert a("The Company's founders were running in Paris") == ["compani", "founder", "were", "run", "pari"]
    assert Analyzer("none")("Running and jumping") == ["running", "jumping"]


def test_words_of_one_or_two_letters_are_not_stemmed_as_in_lucene() -> None:
    # PyStemmer's porter gives "" for "s", "u" for "us", "o" for "os"; Lucene's PorterStemmer skips words this short
    assert Analyzer("porter")("US os s cats") == ["us", "os", "s", "cat"]


def test_lucene_norm_lengths_match_smallfloat() -> None:
    # exact below 24; above, 24 + (n - 24) keeping its 4 leading bits
    got = lucene_norm_length(np.array([0, 5, 23, 24, 30, 39, 40, 41, 56, 100, 1000]))
    assert got.tolist() == [0, 5, 23, 24, 30, 39, 40, 40, 56, 96, 984]


def _naive_bm25(passages: list[Passage], query: str, k1: float = 0.9, b: float = 0.4) -> list[float]:
    an = Analyzer("porter")
    docs = [an(p.contents) for p in passages]
    n = len(docs)
    lengths = lucene_norm_length(np.array([len(d) for d in docs]))
    avgdl = sum(len(d) for d in docs) / n
    df = Counter(t for d in docs for t in set(d))
    out = []
    for d, dl in zip(docs, lengths, strict=True):
        tf = Counter(d)
        s = 0.0
        for t in an(query):
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] / (tf[t] + k1 * (1 - b + b * dl / avgdl))
        out.append(s)
    return out


def test_scores_and_ranking_equal_a_naive_bm25() -> None:
    index, passages = _world_index(60)
    for task in generate_search_tasks(generate_world(60, seed=1), 25, seed=3):
        ref = _naive_bm25(passages, task.prompt)
        want = sorted(range(len(ref)), key=lambda i: (-ref[i], passages[i].id))[:5]  # ties by id, as Anserini
        got = index.search(task.prompt, 5)
        assert [p.id for p in got] == [passages[i].id for i in want]
        assert [p.score for p in got] == pytest.approx([ref[i] for i in want], rel=1e-5)


def test_fast_path_equals_exhaustive_scoring() -> None:
    index, _ = _world_index(400)
    queries = [t.prompt for t in generate_search_tasks(generate_world(400, seed=1), 60)]
    queries += ["violinist", "company founded headquarters", "river city", "zzzz unknown"]
    for q in queries:
        tids = [t for t in (index.vocab.get(x) for x in index.analyzer(q)) if t is not None]
        fast = index.rank(q, 10)
        full = _exhaustive(index, tids, 10)
        assert fast[0].tolist() == full[0].tolist(), q


def _exhaustive(index: BM25Index, tids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference: every document scored (float32, terms added in query order), the k best
    positive scores, ties by the lower document index."""
    scores = np.zeros(len(index), dtype=np.float32)
    for t in tids:
        s, e = index.indptr[t], index.indptr[t + 1]
        scores[index.doc_ids[s:e]] += index.impacts[s:e]
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    order = order[scores[order] > 0]
    return order, scores[order]


def test_generated_questions_retrieve_their_gold_passage() -> None:
    world = generate_world(300, seed=2)
    index = BM25Index.build(world_passages(world))
    tasks = list(generate_search_tasks(world, 100, seed=0))
    hits = sum(t.meta["gold_ids"][0] in {p.id for p in index.search(t.prompt, 3)} for t in tasks)
    assert hits >= 95


def test_save_load_roundtrip(tmp_path: Path) -> None:
    index, _ = _world_index(100)
    index.save(tmp_path / "idx")
    again = BM25Index.load(tmp_path / "idx")
    for q in ["In which city was anyone born?", "glassware company", "river"]:
        assert index.search(q, 5) == again.search(q, 5)
    assert len(again) == len(index)


def test_a_save_that_fails_part_way_keeps_the_earlier_index_and_leaves_no_temp_folder(tmp_path: Path) -> None:
    index, passages = _world_index(100)
    index.save(tmp_path / "idx")
    bad = [*passages[:3], Passage(id="x", title="t", text="a lone surrogate \ud800")]
    with pytest.raises(UnicodeEncodeError):
        BM25Index.build(bad).save(tmp_path / "idx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    assert len(BM25Index.load(tmp_path / "idx")) == len(index)


def test_missing_index_directory_says_how_to_build(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"does not exist.*python -m prm_gym\.envs\.search\.index\.bm25 --corpus"):
        BM25Index.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no BM25 index"):
        open_retriever("bm25", str(tmp_path / "empty"))


def test_corpus_formats_and_broken_lines(tmp_path: Path) -> None:
    good = tmp_path / "c.jsonl"
    good.write_text(
        json.dumps({"id": "a", "contents": '"Alpha"\nAlpha is a river.'})
        + "\n\n"
        + json.dumps({"id": "b", "title": "Beta", "text": "Beta is a city."})
        + "\n"
    )
    got = list(read_corpus(good))
    assert [(p.id, p.title) for p in got] == [("a", "Alpha"), ("b", "Beta")]
    assert [p.text for p in got] == ["Alpha is a river.", "Beta is a city."]
    assert BM25Index.from_corpus(good).search("river", 1)[0].id == "a"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + '{"id": "c", "contents": "trunc\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:4: not valid JSON"):
        list(read_corpus(bad))
    bad.write_text('{"id": "x"}\n')
    with pytest.raises(ConfigError, match=r":1: needs 'contents' or 'text'"):
        BM25Index.from_corpus(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        list(read_corpus(tmp_path / "missing.jsonl"))


def test_write_corpus_roundtrip(tmp_path: Path) -> None:
    ps = [Passage("1", "T", "body one"), Passage("2", "", "body two")]
    assert list(read_corpus(write_corpus(ps, tmp_path / "o.jsonl"))) == ps


def test_bad_queries_are_the_agents_error() -> None:
    index, _ = _world_index(50)
    for q in ["", "   ", "x" * 100_000]:
        with pytest.raises(ToolError):
            index.search(q, 3)
    with pytest.raises(ToolError, match="k must be"):
        index.search("river", 0)
    assert index.search("qqqq zzzz", 3) == []
    assert index.search("!!! ???", 3) == []
    # a query's cost grows with its words: past 32 (under 1,024 characters) it is refused, so no agent
    # can write one slow enough that a retrieval server's deadline counts it as infrastructure
    assert len(index.search(" ".join(["river"] * 32), 3)) == 3
    with pytest.raises(ToolError, match="33 words; the limit is 32"):
        index.search(" ".join(["river"] * 33), 3)
    with pytest.raises(ToolError, match="340 words"):  # punctuation splits terms as the analyzer does
        index.search(",".join(["ab"] * 340), 3)


def _zipf_index(n: int = 6000, seed: int = 0) -> tuple[BM25Index, list[str]]:
    """A corpus whose vocabulary is Zipfian and varied (rare to very common words), and queries
    that draw words as often as they occur: posting lengths span 1 to most of the corpus."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}x{'q' * (i % 3)}" for i in range(20_000)]
    weights = np.arange(1, len(vocab) + 1, dtype=float) ** -1.07
    draws = rng.choice(len(vocab), size=n * 40, p=weights / weights.sum())
    passages = [Passage(f"d{i:05d}", "", " ".join(vocab[j] for j in draws[i * 40 : (i + 1) * 40])) for i in range(n)]
    queries = []
    for p in rng.integers(0, n, 150).tolist():
        words = passages[p].text.split()
        queries.append(" ".join(words[j] for j in rng.integers(0, len(words), int(rng.integers(1, 8)))))
    return BM25Index.build(passages), queries


def test_candidate_scoring_equals_exhaustive_scoring_on_a_zipfian_corpus() -> None:
    index, queries = _zipf_index()
    for q in [*queries, "w0 w0 w1", "w19999x"]:  # a repeated word counts twice, as in Lucene
        tids = [t for t in (index.vocab.get(x) for x in index.analyzer(q)) if t is not None]
        fast, full = index.rank(q, 10), _exhaustive(index, tids, 10)
        assert fast[0].tolist() == full[0].tolist() and fast[1].tolist() == full[1].tolist(), q


def test_batch_search_spreads_over_threads_with_the_same_results() -> None:
    index, queries = _zipf_index(2000, seed=1)
    alone = index.search_batch(queries, 10)
    index.threads = 2
    assert index.search_batch(queries, 10) == alone
    assert any(t.name.startswith("bm25") for t in threading.enumerate())  # the batch ran on the pool
    with pytest.raises(ToolError):
        index.search_batch([*queries[:3], ""], 10)  # every query is checked before any work
    index.close()
    assert index.search_batch(queries[:5], 10) == alone[:5]  # closed: a later batch starts it again
    index.close()


def _random_index(rng: np.random.Generator, n: int, vocab: int, exponent: float, length: int) -> BM25Index:
    """Passages of Zipfian words over ``vocab`` (rank 0 commonest), lengths 1..2*length."""
    weights = np.arange(1, vocab + 1, dtype=float) ** -exponent
    lengths = rng.integers(1, 2 * length + 1, n)
    draws = rng.choice(vocab, size=int(lengths.sum()), p=weights / weights.sum())
    cuts = np.cumsum(lengths)[:-1]
    return BM25Index.build(
        Passage(f"d{i:06d}", "", " ".join(f"t{j}z" for j in words)) for i, words in enumerate(np.split(draws, cuts))
    )


@pytest.mark.parametrize("seed", range(6))
def test_block_max_top_k_is_identical_to_exhaustive_scoring(seed: int) -> None:
    """Random corpora (sizes across the block size, flat to steep vocabularies, short and long
    passages): ids and float32 scores of the top k equal scoring every document, for common,
    rare, absent and repeated words and k from 1 to more than the matching documents."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([7, 130, 900, 5000]))
    index = _random_index(rng, n, int(rng.choice([30, 3000])), float(rng.uniform(0.6, 1.3)), int(rng.integers(3, 60)))
    words = sorted(index.vocab)
    for _ in range(60):
        q = " ".join(rng.choice(words, int(rng.integers(1, 9))).tolist())
        q += " nosuchword" * int(rng.integers(0, 2))
        tids = [index.vocab[t] for t in index.analyzer(q) if t in index.vocab]
        for k in (1, 10, int(rng.integers(1, 101))):
            got, want = index.rank(q, k), _exhaustive(index, tids, k)
            assert got[0].tolist() == want[0].tolist(), (q, k)
            assert got[1].tolist() == want[1].tolist(), (q, k)


def test_ties_at_the_cut_rank_by_lower_index_as_exhaustive_scoring() -> None:
    """Many documents with the same text: every score ties, across many blocks; the top k are
    the k lowest indices, as scoring every document gives, whatever block is scored first."""
    same = [Passage(f"d{i:05d}", "", "alpha beta" if i % 7 else "alpha beta gamma") for i in range(3000)]
    index = BM25Index.build(same)
    for q, k in (("alpha", 10), ("alpha beta", 25), ("gamma alpha", 10), ("beta beta", 3)):
        tids = [index.vocab[t] for t in index.analyzer(q)]
        got, want = index.rank(q, k), _exhaustive(index, tids, k)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist(), q


def test_a_query_scores_a_small_part_of_a_large_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """No dense fallback: a query with a rare word and common words scores a few blocks, not
    every document (the old path scored all of them past a candidate limit)."""
    rng = np.random.default_rng(3)
    index = _random_index(rng, 20_000, 5000, 1.05, 30).warm()
    scored: list[int] = []
    real = index.blockmax._score_blocks

    def counting(tids: list[int], sel: np.ndarray, *rest: object) -> tuple[np.ndarray, np.ndarray]:
        scored.append(len(sel))
        return real(tids, sel, *rest)

    monkeypatch.setattr(index.blockmax, "_score_blocks", counting)
    common = [w for w, _ in sorted(index.vocab.items(), key=lambda kv: -int(np.diff(index.indptr)[kv[1]]))[:3]]
    df = np.diff(index.indptr)
    rare = next(w for w, t in index.vocab.items() if 20 <= df[t] <= 40)
    got = index.rank(" ".join([*common, rare]), 10)
    tids = [index.vocab[t] for t in [*common, rare]]
    assert got[0].tolist() == _exhaustive(index, tids, 10)[0].tolist()
    assert sum(scored) * 2**index.blockmax.shift < len(index) / 4, scored


def test_postings_built_in_chunks_equal_postings_built_at_once() -> None:
    """The low-memory build (two passes over chunks of documents) gives the very same arrays."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 30, 1000)
    term_ids = rng.zipf(1.3, int(lengths.sum())).clip(max=499).astype(np.int32) - 1
    whole = postings(term_ids, lengths, 500)
    cuts = [0, 1, 333, 334, 900, 1000]
    ends = np.concatenate([[0], np.cumsum(lengths)])

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for lo, hi in itertools.pairwise(cuts):
            yield term_ids[ends[lo] : ends[hi]], lengths[lo:hi]

    parts = postings_in_chunks(chunks, 500)
    for a, b in zip(whole, parts, strict=True):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
