"""prm/SQL-v0 end to end: registration, episodes, rewards, bad input, Spider/BIRD tasks."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import TaskError
from prm_gym.core.parsing import format_answer, format_tool_call
from prm_gym.envs.sql.env import SQLEnv
from prm_gym.envs.sql.tasks import generate_sql_tasks, load_sql_file

TERMS = ("outcome", "syntax", "schema", "overlap", "explore", "format", "tool")


def _check_info(reward: float, info: dict[str, Any]) -> None:
    total = sum(float(info[f"reward_{t}"]) for t in TERMS)
    assert abs(total - reward) < 1e-6


def test_registered_and_passes_env_checker(tmp_path: Path) -> None:
    env = gym.make("prm/SQL-v0", cache_dir=str(tmp_path))
    check_env(env.unwrapped)
    env.close()


def test_gold_answer_scores_full_reward(tmp_path: Path) -> None:
    env = SQLEnv(cache_dir=tmp_path, num_tasks=40)
    for task in list(env.tasks)[:12]:
        obs, info = env.reset(options={"task_id": task.id})
        assert task.prompt in obs and info["db_id"] == task.meta["db_id"]
        obs, reward, term, trunc, info = env.step(format_answer(str(task.answer)))
        assert term and not trunc and info["reward_status"] == "ok"
        assert info["reward_outcome"] == 1.0 and info["reward_schema"] == pytest.approx(0.1)
        _check_info(reward, info)
    env.close()
    env.close()


def test_exploration_turns_and_flagged_bad_queries(tmp_path: Path) -> None:
    env = SQLEnv(cache_dir=tmp_path, num_tasks=10, max_rows=3)
    env.reset(seed=0)
    assert env.task is not None
    table = str(env.task.answer).split("FROM ")[1].split()[0]
    obs, r, _, _, info = env.step(format_tool_call("list_tables", {}))
    assert info["reward_explore"] == pytest.approx(0.05) and table in obs
    obs, r, _, _, info = env.step(format_tool_call("run_query", {"sql": f"SELECT * FROM {table}"}))
    assert "returned more" in obs and info["tool"]["ok"]
    for bad in ("SELEC * FROM x", f"DROP TABLE {table}", "SELECT 1; SELECT 2"):
        obs, r, _, _, info = env.step(format_tool_call("run_query", {"sql": bad}))
        assert info["reward_tool"] == pytest.approx(-0.1) and info["reward_status"] == "ok"
        assert "Error:" in obs
        _check_info(r, info)
    obs, r, term, trunc, info = env.step(format_answer("DELETE FROM customers"))
    assert term and info["reward_outcome"] == 0.0 and info["reward_syntax"] == 0.0
    _check_info(r, info)


def test_missing_database_mid_run_is_flagged_infra(tmp_path: Path) -> None:
    db = tmp_path / "one.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (a)")
    conn.commit()
    conn.close()
    tasks = [{"id": "a", "prompt": "How many rows?", "answer": "SELECT COUNT(*) FROM t", "meta": {"db_path": str(db)}}]
    env = SQLEnv(tasks)
    db.unlink()
    obs, _ = env.reset(seed=0)
    assert "unavailable" in obs
    _, r, _, _, info = env.step(format_tool_call("list_tables", {}))
    assert info["reward_status"] == "infra_error" and info["reward_tool"] == 0.0
    _, r, term, _, info = env.step(format_answer("SELECT COUNT(*) FROM t"))
    assert term and info["reward_status"] == "infra_error" and "error" in info["judge"]["rule/execution_match"]


def test_fork_replays_the_episode(tmp_path: Path) -> None:
    env = SQLEnv(cache_dir=tmp_path, num_tasks=10)
    env.reset(seed=3)
    env.step(format_tool_call("list_tables", {}))
    clone = env.fork()
    assert clone.task == env.task and clone.actions == env.actions
    _, r1, *_ = env.step(format_answer(str(env.task.answer if env.task else "")))
    _, r2, *_ = clone.step(format_answer(str(clone.task.answer if clone.task else "")))
    assert r1 == r2 > 1.0
    clone.close()


def test_generator_is_seeded_graded_and_non_empty(tmp_path: Path) -> None:
    a = generate_sql_tasks(60, seed=5, cache_dir=tmp_path)
    b = generate_sql_tasks(60, seed=5, cache_dir=tmp_path)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    assert {t.meta["level"] for t in a} == {1, 2, 3, 4}
    assert {t.meta["schema"] for t in a} == {"shop", "school", "flights"}
    test = generate_sql_tasks(60, seed=5, split="test", cache_dir=tmp_path)
    assert [t.prompt for t in test] != [t.prompt for t in a]
    with pytest.raises(TaskError, match="schemas"):
        generate_sql_tasks(5, schemas=("zoo",), cache_dir=tmp_path)


def _spider_dir(tmp_path: Path) -> Path:
    (tmp_path / "database" / "pets").mkdir(parents=True)
    conn = sqlite3.connect(tmp_path / "database" / "pets" / "pets.sqlite")
    conn.executescript(
        "CREATE TABLE pet (name TEXT, kind TEXT); INSERT INTO pet VALUES ('Rex', 'dog'), ('Tom', 'cat');"
    )
    conn.commit()
    conn.close()
    (tmp_path / "database" / "junk").mkdir()
    (tmp_path / "database" / "junk" / "junk.sqlite").write_text("not a database")
    return tmp_path


def test_spider_and_bird_loaders(tmp_path: Path) -> None:
    root = _spider_dir(tmp_path)
    spider = [{"db_id": "pets", "question": "Name the dogs.", "query": "SELECT name FROM pet WHERE kind = 'dog'"}]
    (root / "dev.json").write_text(json.dumps(spider))
    bird = {
        "question_id": 7,
        "db_id": "pets",
        "question": "Cats?",
        "SQL": "SELECT name FROM pet WHERE kind='cat'",
        "evidence": "kind is lower case",
        "difficulty": "simple",
    }
    (root / "bird.jsonl").write_text(json.dumps(bird) + "\n")
    tasks = load_sql_file(root / "dev.json")
    assert tasks[0].answer.startswith("SELECT") and tasks[0].meta["db_id"] == "pets"
    birds = load_sql_file(root / "bird.jsonl", root / "database")
    assert birds.ids == ["7"] and "Hint: kind is lower case" in birds[0].prompt
    env = SQLEnv(str(root / "dev.json"), db_dir=str(root / "database"))
    env.reset(seed=0)
    _, r, term, _, info = env.step(format_answer("SELECT name FROM pet WHERE kind = 'dog'"))
    assert term and info["reward_outcome"] == 1.0


@pytest.mark.parametrize(("db_id", "message"), [("gone", "no database for db_id"), ("junk", "not an SQLite 3")])
def test_loader_rejects_missing_or_non_sqlite_databases(tmp_path: Path, db_id: str, message: str) -> None:
    root = _spider_dir(tmp_path)
    recs = [
        {"db_id": db_id, "question": "q", "query": "SELECT 1"},
        {"db_id": "pets", "question": "q", "query": "SELECT 1"},
    ]
    (root / "dev.json").write_text(json.dumps(recs))
    with pytest.raises(TaskError, match=message):
        load_sql_file(root / "dev.json")
    assert len(load_sql_file(root / "dev.json", on_missing="skip")) == 1


def test_term_weights_come_from_the_judge_expression(tmp_path: Path) -> None:
    env = SQLEnv(cache_dir=tmp_path, num_tasks=5, judge="2*rule/execution_match + 0.5*rule/sql_schema_link")
    env.reset(seed=0)
    assert env.task is not None
    _, reward, _, _, info = env.step(format_answer(str(env.task.answer)))
    assert info["reward_outcome"] == 2.0 and info["reward_schema"] == 0.5 and reward == 2.5
    assert "reward_syntax" not in info
