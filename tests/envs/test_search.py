"""prm/Search-v0: episodes, rewards, the info contract, task loaders and infra failures."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import ConfigError, TaskError
from prm_gym.core.parsing import format_answer, format_tool_call
from prm_gym.core.tasks import Task
from prm_gym.envs.search.env import SearchEnv, format_passages
from prm_gym.envs.search.index import BM25Index, Passage
from prm_gym.envs.search.index.server import RetrievalServer
from prm_gym.envs.search.tasks import (
    generate_search_tasks,
    generate_world,
    load_qa_file,
    split_of,
    world_passages,
)
from prm_gym.rewards.retrieval import retrieved


def _search(q: str) -> str:
    return format_tool_call("search", {"query": q})


def _terms_sum(info: dict, reward: float) -> None:
    total = sum(v for k, v in info.items() if k.startswith("reward_") and k != "reward_status")
    assert total == pytest.approx(reward, abs=1e-6)


@pytest.fixture(scope="module")
def world_index() -> BM25Index:
    return BM25Index.build(world_passages(generate_world(300, seed=0)))


def test_default_make_is_fast_and_passes_check_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRM_GYM_CACHE", str(tmp_path))  # our own variable, not a global of a library
    start = time.perf_counter()
    env = gym.make("prm/Search-v0")
    assert time.perf_counter() - start < 2.0
    assert any(p.name.startswith("world-300-0-") for p in (tmp_path / "search").iterdir())
    start = time.perf_counter()
    env2 = gym.make("prm/Search-v0")  # from the cache now
    assert time.perf_counter() - start < 1.0
    check_env(env.unwrapped)
    env.close()
    env2.close()
    env2.close()


def test_multi_hop_episode_rewards(world_index: BM25Index) -> None:
    env = SearchEnv(index=world_index)
    task = next(t for t in env.tasks if t.meta["hops"] == 3)
    obs, info = env.reset(seed=0, options={"task_id": task.id})
    assert task.prompt in obs and info["tools"][0]["function"]["name"] == "search"
    person = task.prompt.split("where ")[1].split(" was born")[0]
    obs, reward, term, trunc, info = env.step(_search(person))
    assert "<tool_response>" in obs and not term and not trunc
    ids, _ = retrieved([obs])
    assert task.meta["gold_ids"][0] in ids
    assert info["reward_retrieval"] == pytest.approx(0.2 / 3) and info["reward_status"] == "ok"
    assert info["retrieval"]["queries"] == 1 and info["retrieval"]["passages"] == 3
    _terms_sum(info, reward)
    obs, reward, *_, info = env.step(_search(person))  # the same search again earns nothing
    assert info["reward_retrieval"] == 0.0
    obs, reward, term, trunc, info = env.step(format_answer(task.answer[0].upper()))
    assert term and info["reward_outcome"] == 1.0 and info["answer"] == task.answer[0].upper()
    _terms_sum(info, reward)
    env.close()


def test_wrong_answer_f1_judge_and_truncation(world_index: BM25Index) -> None:
    env = SearchEnv(index=world_index, judge="rule/f1 + 0.1*rule/format", max_turns=2)
    env.reset(seed=1)
    _, r, term, trunc, info = env.step("I will just think.")
    assert r == pytest.approx(-0.1) and info["parse"]["issues"] == "no_action" and not trunc
    _, r, term, trunc, info = env.step(format_answer("Nobody Anywhere"))
    assert term and info["reward_outcome"] == 0.0
    env.reset(seed=1)
    env.step(_search("river"))
    *_, trunc, info = env.step(_search("city"))
    assert trunc


def test_bad_queries_are_tool_errors_not_infra(world_index: BM25Index) -> None:
    env = SearchEnv(index=world_index)
    env.reset(seed=0)
    obs, _, _, _, info = env.step(_search(""))
    assert "empty" in obs and info["tool"]["ok"] is False and info["reward_status"] == "ok"
    obs, _, _, _, info = env.step(_search("x" * 5000))
    assert "limit" in obs and info["reward_status"] == "ok"
    obs, _, _, _, info = env.step(_search("y" * 100_000))  # longer than any action
    assert info["parse"]["issues"] == "action_too_long" and info["tool"]["calls"] == 0


def test_http_backend_and_server_outage_flag_infra_error(world_index: BM25Index) -> None:
    srv = RetrievalServer(world_index, port=0).start()
    env = SearchEnv(index=srv.url, retrieval_timeout_s=2.0)
    task = env.tasks[0]
    env.reset(options={"task_id": task.id})
    obs, _, _, _, info = env.step(_search(task.prompt))
    assert info["reward_status"] == "ok" and info["retrieval"]["passages"] == 3
    srv.stop()
    obs, reward, term, _, info = env.step(_search(task.prompt))
    assert info["reward_status"] == "infra_error" and "infrastructure error" in obs and not term
    assert info["reward_retrieval"] == 0.0
    env.close()
    env.close()


def test_fork_replays_the_episode(world_index: BM25Index) -> None:
    env = SearchEnv(index=world_index)
    env.reset(seed=3)
    env.step(_search("river"))
    clone = env.fork()
    assert clone.actions == env.actions and clone.task == env.task
    assert clone.step(format_answer("x"))[4]["turn"] == 2


class _CountingRetriever:
    """A retriever that counts its searches (the index it wraps is real)."""

    name = "counting"

    def __init__(self, index: BM25Index) -> None:
        self.index, self.calls = index, 0

    def search(self, query: str, k: int = 3) -> list[Passage]:
        self.calls += 1
        return self.index.search(query, k)

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]

    def close(self) -> None:
        pass


def test_fork_reuses_recorded_passages_and_keeps_the_retrieval_state(world_index: BM25Index) -> None:
    retriever = _CountingRetriever(world_index)
    env = SearchEnv(index=retriever, num_tasks=20)
    env.reset(seed=1)
    task = env.task
    assert task is not None
    env.step(_search(task.prompt))
    env.step(_search("river mountain"))
    assert retriever.calls == 2
    clone = env.fork()
    assert retriever.calls == 2, "fork() searched again instead of reusing the recorded passages"
    assert clone._seen == env._seen and clone._recall == env._recall
    a, b = env.step(_search(task.prompt + " born")), clone.step(_search(task.prompt + " born"))
    assert a[0] == b[0] and a[1] == b[1] and a[4]["retrieval"] == b[4]["retrieval"]
    env.close()
    clone.close()


def test_judges_see_every_search_turn(world_index: BM25Index) -> None:
    from prm_gym.rewards.protocol import Scope
    from prm_gym.rewards.registry import register_judge
    from prm_gym.rewards.types import Turn, Verdict

    seen: list[Turn] = []

    class Recorder:
        name = "test/recorder"
        term = "process"
        scope: Scope = "turn"

        def score(self, turns: Sequence[Turn]) -> list[Verdict]:
            seen.extend(turns)
            return [Verdict(0.5) for _ in turns]

    register_judge("test/recorder", lambda: Recorder(), overwrite=True)
    env = SearchEnv(index=world_index, judge="rule/exact_match + 0.1*test/recorder")
    env.reset(seed=0)
    _, r, *_, info = env.step(_search("river"))
    assert info["reward_process"] == pytest.approx(0.05) and r == pytest.approx(0.05)
    assert seen[0].tool_results[0].name == "search" and "Doc 1 [id=" in seen[0].tool_results[0].output


def test_generator_is_seeded_and_splits_differ() -> None:
    w = generate_world(100, seed=5)
    a, b = generate_search_tasks(w, 50, 1), generate_search_tasks(w, 50, 1)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    assert [t.prompt for t in generate_search_tasks(w, 50, 1, "test")] != [t.prompt for t in a]
    assert {t.meta["kind"] for t in a} == {"single", "multi"}
    names = [p.title for p in world_passages(w)]
    assert len(set(names)) == len(names)
    with pytest.raises(TaskError):
        generate_search_tasks(w, 5, split="dev")


def _fingerprint(tasks: Iterable[Task]) -> str:
    return hashlib.sha256(json.dumps([t.to_dict() for t in tasks], sort_keys=True).encode()).hexdigest()[:16]


def test_disjoint_splits_share_no_subject_and_the_default_draw_is_unchanged() -> None:
    """By default the splits are independent draws from one finite question space (70 of 100 test
    questions are training questions too); disjoint splits give each person and company to one
    split, so no test question names anyone a training question names. The default draw is the
    one every committed study used, byte for byte (its fingerprint)."""
    w = generate_world(300, 0)
    train = generate_search_tasks(w, 2000, 0, "train")
    test = generate_search_tasks(w, 100, 0, "test")
    assert sum(t.prompt in {x.prompt for x in train} for t in test) == 70
    assert _fingerprint(generate_search_tasks(w, 2000, 0, "test")) == "ae2514c620900d1e"
    assert _fingerprint(generate_search_tasks(w, 2000, 0, "test", "multi")) == "dbc7b34cd8988cae"
    splits = {s: generate_search_tasks(w, 400, 0, s, "all", disjoint=True) for s in ("train", "validation", "test")}
    by_id = {p.id: p for p in world_passages(w)}
    named = {s: {by_id[t.meta["gold_ids"][0]].title for t in ts} for s, ts in splits.items()}
    assert not (named["train"] & named["test"]) and not (named["train"] & named["validation"])
    assert not (named["validation"] & named["test"])
    assert {t.meta["kind"] for t in splits["test"]} == {"single", "multi"}
    for task in splits["test"]:  # the answer is still in the last gold passage
        assert split_of(task.meta["gold_ids"][0]) == "test" and task.answer[0] in by_id[task.meta["gold_ids"][-1]].text
    env = gym.make("prm/Search-v0", split="test", disjoint_splits=True, num_tasks=50)
    prompts = {env.unwrapped.tasks.get(i).prompt for i in env.unwrapped.tasks.ids}
    assert not prompts & {t.prompt for t in generate_search_tasks(w, 2000, 0, "train", disjoint=True)}
    env.close()
    with pytest.raises(TaskError, match="too small for disjoint splits"):
        generate_search_tasks(generate_world(8, 0), 5, 0, "test", disjoint=True)
    with pytest.raises(ConfigError, match="generated questions only"):
        gym.make("prm/Search-v0", tasks=[{"question": "q", "answer": "a"}], disjoint_splits=True)


def test_qa_loaders(tmp_path: Path, world_index: BM25Index) -> None:
    nq = tmp_path / "nq.jsonl"
    nq.write_text(
        json.dumps({"id": "q1", "question": "who?", "golden_answers": ["Ann", "Anne"]})
        + "\n"
        + json.dumps({"question": "what?", "answer": "Bob"})
        + "\n"
    )
    ts = load_qa_file(nq)
    assert [t.answer for t in ts] == [["Ann", "Anne"], ["Bob"]] and ts.ids == ["q1", "line-2"]
    hp = tmp_path / "hotpot.json"
    hp.write_text(
        json.dumps([{"_id": "h1", "question": "q?", "answer": "yes", "supporting_facts": [["T1", 0], ["T2", 1]]}])
    )
    assert load_qa_file(hp)[0].meta["gold_titles"] == ["T1", "T2"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(TaskError, match=r"bad\.jsonl:1: missing field 'golden_answers'"):
        load_qa_file(bad)
    env = SearchEnv(str(nq), index=world_index)
    env.reset(options={"task_id": "q1"})
    *_, info = env.step(format_answer("the ann"))
    assert info["reward_outcome"] == 1.0


def test_retrieval_judge_falls_back_to_answer_containment(tmp_path: Path) -> None:
    corpus = [Passage("p1", "Zed", "Zed lives in Quorra."), Passage("p2", "Other", "Nothing here.")]
    env = SearchEnv(
        [{"id": "t", "prompt": "Where does Zed live?", "answer": ["Quorra"]}], index=BM25Index.build(corpus)
    )
    env.reset(options={"task_id": "t"})
    assert env.step(_search("Nothing"))[4]["reward_retrieval"] == 0.0
    assert env.step(_search("Zed"))[4]["reward_retrieval"] == pytest.approx(0.2)
    assert env.step(_search("Zed lives"))[4]["reward_retrieval"] == 0.0
    assert format_passages([]).startswith("No passages")


def test_multi_hop_only_questions_need_a_bridge_and_leave_the_default_unchanged() -> None:
    w = generate_world(60, 0)
    multi = generate_search_tasks(w, 40, 0, "train", "multi")
    by_id = {p.id: p for p in world_passages(w)}
    for task in multi:
        assert task.meta["kind"] == "multi" and task.meta["hops"] >= 2
        first, last = by_id[task.meta["gold_ids"][0]], by_id[task.meta["gold_ids"][-1]]
        # the question names only the first hop's entity; the answer is in the last passage, not the first
        assert first.title in task.prompt and task.answer[0] not in first.text and task.answer[0] in last.text
    assert {t.meta["hops"] for t in multi} == {2, 3}
    default = generate_search_tasks(w, 40, 0, "train")
    assert [t.prompt for t in default] == [t.prompt for t in generate_search_tasks(w, 40, 0, "train", "all")]
    assert {t.meta["kind"] for t in default} == {"single", "multi"}
    assert {t.meta["kind"] for t in generate_search_tasks(w, 20, 0, "train", "single")} == {"single"}
    with pytest.raises(TaskError, match="kinds must be one of"):
        generate_search_tasks(w, 4, 0, "train", "both")
    env = gym.make("prm/Search-v0", question_kinds="multi", num_tasks=8, world_people=60)
    assert all(env.unwrapped.tasks.get(i).meta["hops"] >= 2 for i in env.unwrapped.tasks.ids)
    env.close()
