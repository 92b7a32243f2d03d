"""Generated task sets are built once per process and shared, read-only, by every env."""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
import time
from pathlib import Path

import gymnasium as gym
import pytest

import prm_gym
from prm_gym.core.tasks import ReadOnlyDict, Task, TaskSet, frozen
from prm_gym.envs.math.tasks import generate_math_tasks
from prm_gym.envs.search.tasks import generate_search_tasks, generate_world
from prm_gym.envs.sql.tasks import generate_sql_tasks

#: sha256 (first 16 hex) of [id, prompt, answer, meta without db_path] of each id's default
#: task set, recorded from the generators before they were shared: sharing changed no task.
FINGERPRINTS = {
    "prm/Math-v0": (1000, "b123c0376c7829e8"),
    "prm/Code-v0": (500, "729ef84d21d5234b"),
    "prm/SQL-v0": (500, "5adbbe9b884a14c4"),
    "prm/Search-v0": (1000, "e67c4bb9c64b1ba7"),
}


def _fingerprint(tasks: TaskSet) -> tuple[int, str]:
    rows = [[t.id, t.prompt, t.answer, {k: v for k, v in t.meta.items() if k != "db_path"}] for t in tasks]
    return len(rows), hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("env_id", sorted(prm_gym.ENVS))
def test_envs_share_one_generated_task_set_with_the_same_tasks(env_id: str) -> None:
    a, b = gym.make(env_id), gym.make(env_id)
    try:
        assert a.unwrapped.tasks is b.unwrapped.tasks  # type: ignore[attr-defined]
        assert _fingerprint(a.unwrapped.tasks) == FINGERPRINTS[env_id]  # type: ignore[attr-defined]
        obs_a, _ = a.reset(seed=3)
        obs_b, _ = b.reset(seed=3)
        assert obs_a == obs_b
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("env_id", sorted(prm_gym.ENVS))
def test_make_after_the_first_build_is_cheap(env_id: str) -> None:
    """A deadline, not a benchmark: rebuilding the task set took 8-30 ms a make; now ~0.1-0.3 ms.
    (prm/Code-v0 starts its warm sandbox pools when made, by design: three threads, several ms on a
    loaded machine; measured here without them, as this guards the task set's cost.)"""
    kw = {"sandbox": "bwrap", "judge_sandbox": "bwrap"} if env_id == "prm/Code-v0" else {}
    gym.make(env_id, **kw).close()
    times = []
    for _ in range(15):
        t = time.perf_counter()
        env = gym.make(env_id, **kw)
        times.append(time.perf_counter() - t)
        env.close()
    assert sorted(times)[len(times) // 2] < 0.005


def test_shared_task_meta_is_read_only_yet_a_dict() -> None:
    task = generate_math_tasks(50, seed=1)[0]
    assert isinstance(task.meta, ReadOnlyDict) and task.meta == {"level": task.meta["level"]}
    with pytest.raises(TypeError, match="read-only"):
        task.meta["level"] = 9  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        task.meta.update(level=9)  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(task)) == task
    assert copy.deepcopy(task) == task and json.loads(json.dumps(task.to_dict()))["meta"] == dict(task.meta)
    free = Task(task.id, task.prompt, task.answer, dict(task.meta))
    assert frozen(TaskSet([free]))[0] == free  # equal content, now read-only


def test_the_cache_key_is_the_arguments_with_defaults_filled_in() -> None:
    assert generate_math_tasks(40) is generate_math_tasks(n=40, seed=0, split="train", levels=[1, 2, 3])
    assert generate_math_tasks(40) is not generate_math_tasks(40, seed=1)
    assert {t.meta["level"] for t in generate_math_tasks(40, levels=(4,))} == {4}


def test_the_world_is_immutable_and_shared() -> None:
    w = generate_world(60, seed=3)
    assert w is generate_world(60, 3)
    with pytest.raises(TypeError):
        w.people[0]["name"] = "Someone"  # type: ignore[index]
    with pytest.raises(AttributeError):
        w.people = ()  # type: ignore[misc]
    assert generate_search_tasks(w, 20, seed=1) is generate_search_tasks(w, 20, 1, "train")


def test_sql_tasks_regenerate_when_their_databases_are_gone(tmp_path: Path) -> None:
    first = generate_sql_tasks(12, seed=5, cache_dir=tmp_path)
    assert generate_sql_tasks(12, seed=5, cache_dir=str(tmp_path)) is first
    for db in tmp_path.glob("*.sqlite"):
        db.unlink()
    again = generate_sql_tasks(12, seed=5, cache_dir=tmp_path)
    assert again is not first and [t.id for t in again] == [t.id for t in first]
    assert all(Path(t.meta["db_path"]).is_file() for t in again)
