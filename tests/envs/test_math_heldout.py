"""prm/Math-v0's held-out templates: the legacy split (12 of 42, every committed result) and the
rotating one (36 of 72, half multi-call, drawn by ``heldout_seed``)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.envs.math.calculator import evaluate
from prm_gym.envs.math.tasks import generate_math_tasks
from prm_gym.envs.math.words import HELD_OUT, HELD_OUT_PER_KIND, TEMPLATES, _fill, held_out_ids, one_call

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (0, 1, 2, 3, 7)


def _tool_call(expression: str) -> str:
    return "<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "</tool_call>"


def test_the_pool_holds_36_templates_of_each_kind_and_the_rotating_split_36_held_out_half_multi_call() -> None:
    ids = [t.id for t in TEMPLATES]
    assert len(ids) == len(set(ids)) == 72
    assert sum(map(one_call, TEMPLATES)) == 36
    for seed in SEEDS:
        held = held_out_ids(seed)
        assert len(held) == 2 * HELD_OUT_PER_KIND == 36
        assert sum(one_call(t) for t in TEMPLATES if t.id in held) == 18  # the other 18 take 2-3 calls
    # the legacy split is untouched: h01-h12 held out, w01-w30 trained on
    assert held_out_ids(None) == HELD_OUT == {f"h{i:02d}" for i in range(1, 13)}
    legacy_train = {t.meta["template"] for t in generate_math_tasks(600, 0, "train", (5, 6), "train")}
    assert legacy_train == {f"w{i:02d}" for i in range(1, 31)}


def test_every_template_gives_50_distinct_problems_whose_calls_reach_the_gold_answer() -> None:
    rng = np.random.default_rng(0)
    for t in TEMPLATES:
        made = [m for m in (_fill(t, rng, frozenset()) for _ in range(300)) if m is not None]
        assert len({tuple(re.findall(r"\d+", q)) for q, _, _ in made}) >= 50, t.id
        for question, answer, meta in made[:20]:
            results: dict[str, str] = {}
            for i, call in enumerate(meta["calls"]):
                results[f"r{i}"] = evaluate(call.format(**results))
            assert results[f"r{len(meta['calls']) - 1}"] == answer and int(answer) > 0, t.id
            assert "{" not in question and len(meta["calls"]) == len(t.calls)


def test_the_split_is_deterministic_for_a_seed_and_rotates_with_it() -> None:
    assert held_out_ids(0) == held_out_ids(0)
    splits = [held_out_ids(s) for s in SEEDS]
    assert len(set(splits)) == len(SEEDS)
    # pinned: a seed's split never changes (records of rotating runs keep their meaning)
    assert sorted(held_out_ids(0))[:8] == ["h03", "h06", "h10", "h11", "p01", "p02", "p03", "p08"]
    # every template is held out under some seed and trained on under another
    assert set().union(*(held_out_ids(s) for s in range(20))) == {t.id for t in TEMPLATES}
    assert not frozenset.intersection(*(held_out_ids(s) for s in range(20)))


@pytest.mark.parametrize("seed", [0, 5])
def test_held_out_templates_never_appear_in_training_tasks_and_get_about_50_tasks_each(seed: int) -> None:
    held = held_out_ids(seed)
    train = generate_math_tasks(2000, 0, "train", (5, 6), "train", heldout_seed=seed)
    val = generate_math_tasks(200, 0, "validation", (5, 6), "train", heldout_seed=seed)
    test = generate_math_tasks(1800, 0, "test", (5, 6), "held_out", heldout_seed=seed)
    trained = {t.meta["template"] for t in [*train, *val]}
    assert not trained & held and len({t.meta["template"] for t in train}) == 36
    counts = Counter(t.meta["template"] for t in test)
    assert set(counts) == held and min(counts.values()) >= 25 and 45 <= len(test) / len(counts) <= 55
    assert all(t.meta["held_out"] for t in test) and not any(t.meta["held_out"] for t in train)
    for t in [*train, *test]:
        assert (len(t.meta["calls"]) == 1) == (t.meta["level"] == 5)
    # distinct problems, and new phrasings rather than new numbers
    assert len({t.prompt for t in test}) >= 0.95 * len(test)
    skeleton = {re.sub(r"\d+", "N", t.prompt) for t in train}
    assert not {re.sub(r"\d+", "N", t.prompt) for t in test} & skeleton


def test_the_env_verifier_accepts_each_templates_worked_solution_with_its_call_count() -> None:
    env = gym.make("prm/Math-v0", levels=[5, 6], templates="all", heldout_seed=3, num_tasks=800, max_turns=4)
    tasks = env.unwrapped.tasks  # type: ignore[attr-defined]
    by_id = {t.id: t for t in TEMPLATES}
    first: dict[str, str] = {}
    for task in tasks:
        first.setdefault(task.meta["template"], task.id)
    assert set(first) == {t.id for t in TEMPLATES}
    for template, task_id in first.items():
        task = tasks.get(task_id)
        env.reset(seed=0, options={"task_id": task_id})
        results: dict[str, str] = {}
        for i, call in enumerate(task.meta["calls"]):
            obs, reward, terminated, _, info = env.step(_tool_call(call.format(**results)))
            assert not terminated and info["tool"]["ok"], template
            results[f"r{i}"] = re.search(r"<tool_response>\s*(.+?)\s*</tool_response>", obs, re.S).group(1)  # type: ignore[union-attr]
        assert results[f"r{len(results) - 1}"] == task.answer, template
        *_, info = env.step(f"<answer>{task.answer}</answer>")
        assert info["reward_outcome"] == 1.0, template
        assert (len(results) == 1) == (task.meta["level"] == 5) == one_call(by_id[template]), template
    env.reset(seed=0, options={"task_id": first["p22"]})
    *_, info = env.step("<answer>1</answer>")
    assert info["reward_outcome"] == 0.0
    env.close()


@pytest.mark.parametrize("run", ["learn-c992789-seed0", "learn-5364c48"])
def test_committed_make_learn_records_still_name_the_legacy_tasks(run: str) -> None:
    """The legacy split's tasks are unchanged: each committed record's task id has its template."""
    for which, templates in (("templates", "held_out"), ("numbers", "train")):
        path = ROOT / "docs" / "results" / run / f"sft-{which}-greedy.json"
        records = json.loads(path.read_text())
        tasks = generate_math_tasks(len(records), 0, "test", (5, 6), templates)
        assert all(tasks.get(r["task_id"]).meta["template"] == r["template"] for r in records)


def test_make_learn_keeps_the_legacy_split_unless_asked_to_rotate() -> None:
    from experiments.learn import env_kwargs, parse_args

    legacy = parse_args([])
    assert all("heldout_seed" not in env_kwargs(legacy, w) for w in ("train", "validation", "numbers", "templates"))
    rotating = parse_args(["--seed", "4", "--heldout-seed", "seed"])
    assert {env_kwargs(rotating, w)["heldout_seed"] for w in ("train", "validation", "numbers", "templates")} == {4}
    assert env_kwargs(parse_args(["--heldout-seed", "9"]), "train")["heldout_seed"] == 9
