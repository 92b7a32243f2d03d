"""The --backend ray / vllm: loop with --asynchronous.enabled: the next step's groups are played
while the learner trains (run here with the in-process pool, which Ray workers stand in for)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.training.config import AsyncConfig, TrainConfig
from prm_gym.training.distributed_loop import LocalRollouts, train_distributed
from prm_gym.training.metrics import read_metrics
from tests.training.test_trainer import small


@pytest.fixture
def timeline(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """When each step's collect started and each learner step ended."""
    import prm_gym.training.trainer

    events: list[tuple[str, float]] = []
    collect, learner_step = LocalRollouts.collect, prm_gym.training.trainer.learner_step

    def spy_collect(self: LocalRollouts, *args: Any, **kwargs: Any) -> Any:
        events.append(("collect", time.perf_counter()))
        return collect(self, *args, **kwargs)

    def spy_learn(*args: Any, **kwargs: Any) -> Any:
        out = learner_step(*args, **kwargs)
        events.append(("learned", time.perf_counter()))
        return out

    monkeypatch.setattr(LocalRollouts, "collect", spy_collect)
    monkeypatch.setattr(prm_gym.training.trainer, "learner_step", spy_learn)
    return events


def overlapped(events: list[tuple[str, float]]) -> list[bool]:
    """For each step after the first: did its collect start before the previous learner step ended?"""
    starts = [t for kind, t in events if kind == "collect"]
    ends = [t for kind, t in events if kind == "learned"]
    return [start < end for start, end in zip(starts[1:], ends, strict=False)]


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("prm-next-rollouts")]


def test_sync_loop_collects_each_step_after_the_last_update(tmp_path: Path, timeline: list[Any]) -> None:
    run = train_distributed(small(tmp_path, steps=3, tasks_per_step=2))
    assert run.step == 3 and overlapped(timeline) == [False, False]
    rows = [r for r in read_metrics(tmp_path) if "trained_rows" in r]
    assert [r["staleness_max"] for r in rows] == [0.0, 0.0, 0.0]


def test_async_loop_plays_the_next_step_while_the_learner_trains(tmp_path: Path, timeline: list[Any]) -> None:
    cfg = small(tmp_path, steps=3, tasks_per_step=2, asynchronous=AsyncConfig(enabled=True, max_staleness=1))
    run = train_distributed(cfg)
    # step s's groups start playing before the learner has finished step s-1 (one version behind)
    assert run.step == 3 and overlapped(timeline) == [True, True]
    rows = [r for r in read_metrics(tmp_path) if "trained_rows" in r]
    assert len(rows) == 3 and all(r["trained_rows"] == 4 for r in rows)
    assert rows[0]["staleness_max"] == 0.0 and all(0.0 <= r["staleness_max"] <= 1.0 for r in rows)
    assert (tmp_path / "checkpoint.pt").exists() and not prefetch_threads()


def test_zero_staleness_keeps_the_async_loop_synchronous(tmp_path: Path, timeline: list[Any]) -> None:
    cfg = small(tmp_path, steps=2, asynchronous=AsyncConfig(enabled=True, max_staleness=0))
    train_distributed(cfg)
    assert overlapped(timeline) == [False]


def test_a_failing_learner_stops_the_prefetch_and_closes_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import prm_gym.training.trainer

    closed: list[bool] = []
    monkeypatch.setattr(LocalRollouts, "close", lambda self: closed.append(True))

    def broken(*args: Any, **kwargs: Any) -> dict[str, float]:
        raise RuntimeError("learner out of memory")

    monkeypatch.setattr(prm_gym.training.trainer, "learner_step", broken)
    cfg = small(tmp_path, steps=3, asynchronous=AsyncConfig(enabled=True, max_staleness=1))
    with pytest.raises(RuntimeError, match="out of memory"):
        train_distributed(cfg)
    assert closed == [True] and not prefetch_threads()


def test_config_rejects_what_the_remote_loop_cannot_run() -> None:
    with pytest.raises(ConfigError, match="vLLM sampler"):
        TrainConfig(policy="vllm:http://127.0.0.1:1", vllm_weights="hf:/tmp/x", asynchronous=AsyncConfig(enabled=True))
    with pytest.raises(ConfigError, match="tree-grpo samples from hf: policies"):
        TrainConfig(algo="tree-grpo", policy="vllm:http://127.0.0.1:1", vllm_weights="hf:/tmp/x")
    assert TrainConfig(algo="tree-grpo", backend="ray").backend == "ray"


def test_tree_grpo_through_the_remote_loop(tmp_path: Path) -> None:
    """Each task's trees are grown by a worker (here the in-process one) and merged for the learner."""
    from prm_gym.training.config import TreeConfig

    tree = TreeConfig(num_trees=2, expand_nodes=1, expand_rounds=1)
    run = train_distributed(small(tmp_path, steps=2, tasks_per_step=2, algo="tree-grpo", tree=tree))
    rows = [r for r in read_metrics(tmp_path) if "trained_rows" in r]
    assert run.step == 2 and len(rows) == 2
    # 2 tasks x 2 trees x (1 chain + 1 branch) leaves per step, all trained or excluded as infra errors
    assert all(r["trained_rows"] + r.get("excluded_trajectories", 0) == 8 for r in rows)
    assert all(r["generated_tokens"] > 0 for r in rows)


def test_publish_without_waiting_lands_before_the_next_group() -> None:
    from prm_gym.core.policy import SamplingParams
    from prm_gym.training.distributed import WorkerSpec

    pool = LocalRollouts(WorkerSpec("prm/Math-v0", env_kwargs={"levels": [1], "num_tasks": 4}))
    try:
        state = pool.worker.policy.model.state_dict()
        with pool._lock:  # a group is playing
            pool.publish(state, 7, wait=False)  # returns at once instead of waiting for the group
            assert pool.worker.policy.version == 0
        groups, _ = pool.collect([("math-train-0-00000", [0, 1])], SamplingParams(max_new_tokens=4), 512)
        assert [t.policy_version for t in groups[0]] == [7, 7]
        pool.publish(state, 8)  # waiting: immediate when no group is playing
        assert pool.worker.policy.version == 8
    finally:
        pool.close()


def test_weights_published_while_older_ones_load_are_not_lost() -> None:
    """v2 arrives while the worker is still loading v1: the next group must load v2."""

    class SlowWorker:
        def __init__(self) -> None:
            self.loaded: list[int] = []
            self.loading, self.release = threading.Event(), threading.Event()

        def set_weights(self, state: Any, version: int) -> None:
            self.loading.set()
            assert self.release.wait(10)
            self.loaded.append(version)

        def play(self, *args: Any) -> list[Any]:
            return []

        def close(self) -> None:
            pass

    from prm_gym.training.distributed import WorkerSpec

    pool = LocalRollouts(WorkerSpec("prm/Math-v0", env_kwargs={"levels": [1], "num_tasks": 4}))
    pool.worker.close()
    slow = SlowWorker()
    pool.worker = slow  # type: ignore[assignment]
    pool.publish(None, 1, wait=False)
    groups = [("math-train-0-00000", [0]), ("math-train-0-00001", [0])]
    player = threading.Thread(target=pool.collect, args=(groups, None, 512))
    player.start()
    assert slow.loading.wait(10)  # the first group is loading v1
    pool.publish(None, 2, wait=False)
    slow.release.set()
    player.join(10)
    assert slow.loaded == [1, 2]
