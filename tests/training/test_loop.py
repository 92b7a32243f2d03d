"""The one loop, synchronous and asynchronous: with --asynchronous.enabled the next steps' groups
are played while the learner trains (in-process here; tests/training/test_parity.py runs the
same config on Ray and a vLLM server)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from prm_gym.training.config import AsyncConfig, RecipeConfig, TrainConfig
from prm_gym.training.metrics import read_metrics
from prm_gym.training.sources import LocalRollouts
from prm_gym.training.trainer import train
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
    return [t for t in threading.enumerate() if t.name.startswith("prm-rollouts")]


def test_sync_loop_collects_each_step_after_the_last_update(tmp_path: Path, timeline: list[Any]) -> None:
    run = train(small(tmp_path, steps=3, tasks_per_step=2))
    assert run.step == 3 and overlapped(timeline) == [False, False]
    rows = [r for r in read_metrics(tmp_path) if "trained_rows" in r]
    assert [r["staleness_max"] for r in rows] == [0.0, 0.0, 0.0]


def test_async_loop_plays_the_next_step_while_the_learner_trains(tmp_path: Path, timeline: list[Any]) -> None:
    cfg = small(tmp_path, steps=3, tasks_per_step=2, asynchronous=AsyncConfig(enabled=True, max_staleness=1))
    run = train(cfg)
    # step s's groups start playing before the learner has finished step s-1 (one version behind)
    assert run.step == 3 and overlapped(timeline) == [True, True]
    rows = [r for r in read_metrics(tmp_path) if "trained_rows" in r]
    assert len(rows) == 3 and all(r["trained_rows"] == 4 for r in rows)
    assert rows[0]["staleness_max"] == 0.0 and all(0.0 <= r["staleness_max"] <= 1.0 for r in rows)
    assert (tmp_path / "checkpoint.pt").exists() and not prefetch_threads()


def test_zero_staleness_keeps_the_async_loop_synchronous(tmp_path: Path, timeline: list[Any]) -> None:
    cfg = small(tmp_path, steps=2, asynchronous=AsyncConfig(enabled=True, max_staleness=0))
    train(cfg)
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
        train(cfg)
    assert closed == [True] and not prefetch_threads()


def test_config_allows_every_backend_with_every_strategy() -> None:
    vllm = dict(policy="vllm:http://127.0.0.1:1", vllm_weights="hf:/tmp/x")
    assert TrainConfig(**vllm, asynchronous=AsyncConfig(enabled=True)).asynchronous.enabled  # type: ignore[arg-type]
    assert TrainConfig(**vllm, algo="tree-grpo").algo == "tree-grpo"  # type: ignore[arg-type]
    assert TrainConfig(algo="tree-grpo", asynchronous=AsyncConfig(enabled=True)).algo == "tree-grpo"
    recipes = RecipeConfig(dynamic_sampling="resample", curriculum=True)
    assert TrainConfig(backend="ray", recipes=recipes, asynchronous=AsyncConfig(enabled=True)).backend == "ray"


def test_staleness_two_plays_two_steps_ahead_and_stays_bounded(tmp_path: Path, timeline: list[Any]) -> None:
    cfg = small(tmp_path, steps=4, asynchronous=AsyncConfig(enabled=True, max_staleness=2))
    train(cfg)
    rows = [r for r in read_metrics(tmp_path) if "trained_rows" in r]
    assert len(rows) == 4 and all(0.0 <= r["staleness_max"] <= 2.0 for r in rows)
    assert not prefetch_threads()


def test_async_tree_grpo_through_the_loop(tmp_path: Path) -> None:
    from prm_gym.training.config import TreeConfig

    tree = TreeConfig(num_trees=2, expand_nodes=1, expand_rounds=1)
    cfg = small(tmp_path, steps=2, algo="tree-grpo", group_size=4, tree=tree, asynchronous=AsyncConfig(enabled=True))
    train(cfg)
    rows = [r for r in read_metrics(tmp_path) if "trained_rows" in r]
    assert len(rows) == 2 and all(r["trained_rows"] + r["excluded_trajectories"] == 4 for r in rows)


def test_tree_grpo_through_the_loop(tmp_path: Path) -> None:
    """Each task's trees are grown by a worker (here the in-process one) and merged for the learner."""
    from prm_gym.training.config import TreeConfig

    tree = TreeConfig(num_trees=2, expand_nodes=1, expand_rounds=1)
    run = train(small(tmp_path, steps=2, tasks_per_step=2, algo="tree-grpo", group_size=4, tree=tree))
    rows = [r for r in read_metrics(tmp_path) if "trained_rows" in r]
    assert run.step == 2 and len(rows) == 2
    # 2 tasks x 2 trees x (1 chain + 1 branch) leaves per step, all trained or excluded as infra errors
    assert all(r["trained_rows"] + r.get("excluded_trajectories", 0) == 8 for r in rows)
    assert all(r["generated_tokens"] > 0 for r in rows)


def test_publish_without_waiting_lands_before_the_next_group() -> None:
    from prm_gym.core.policy import SamplingParams
    from prm_gym.training.worker import WorkerSpec

    pool = LocalRollouts(WorkerSpec("prm/Math-v0", env_kwargs={"levels": [1], "num_tasks": 4}))
    try:
        state = pool.workers[0].policy.model.state_dict()
        with pool._locks[0]:  # a group is playing
            pool.publish(state, 7, wait=False)  # returns at once instead of waiting for the group
            assert pool.workers[0].policy.version == 0
        groups, _ = pool.collect([("math-train-0-00000", [0, 1])], SamplingParams(max_new_tokens=4), 512)
        assert [t.policy_version for t in groups[0].leaves] == [7, 7]
        pool.publish(state, 8)  # waiting: immediate when no group is playing
        assert pool.workers[0].policy.version == 8
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

    from prm_gym.training.worker import WorkerSpec

    pool = LocalRollouts(WorkerSpec("prm/Math-v0", env_kwargs={"levels": [1], "num_tasks": 4}))
    pool.workers[0].close()
    slow = SlowWorker()
    pool.workers[0] = slow  # type: ignore[assignment]
    pool.publish(None, 1, wait=False)
    groups = [("math-train-0-00000", [0]), ("math-train-0-00001", [0])]
    player = threading.Thread(target=pool.collect, args=(groups, None, 512))
    player.start()
    assert slow.loading.wait(10)  # the first group is loading v1
    pool.publish(None, 2, wait=False)
    slow.release.set()
    player.join(10)
    assert slow.loaded == [1, 2]


def test_local_workers_play_groups_side_by_side_and_keep_job_order() -> None:
    """Two in-process workers overlap two slow groups; the results come back in job order and are
    what one worker plays (each group reseeds its sampler)."""
    import gymnasium as gym

    from prm_gym.core.policy import SamplingParams
    from prm_gym.training.worker import WorkerSpec

    class Slow(gym.Wrapper):
        lock, inside, peak = threading.Lock(), 0, 0

        def step(self, action: Any) -> Any:
            with Slow.lock:
                Slow.inside += 1
                Slow.peak = max(Slow.peak, Slow.inside)
            time.sleep(0.3)  # a slow tool call
            with Slow.lock:
                Slow.inside -= 1
            return self.env.step(action)

    if "test/SlowMath-v0" not in gym.registry:
        gym.register("test/SlowMath-v0", entry_point=lambda **kw: Slow(gym.make("prm/Math-v0", **kw)))
    spec = WorkerSpec("test/SlowMath-v0", env_kwargs={"levels": [1], "num_tasks": 4, "max_turns": 1})
    jobs = [("math-train-0-00000", [0, 1]), ("math-train-0-00001", [2, 3])]
    params = SamplingParams(max_new_tokens=4)
    one, two = LocalRollouts(spec), LocalRollouts(spec, [None, None])
    try:
        state = one.workers[0].policy.model.state_dict()
        for pool in (one, two):
            pool.publish(state, 3)
        serial, _ = one.collect(jobs, params, 512)
        assert Slow.peak == 1
        side, _ = two.collect(jobs, params, 512)
    finally:
        one.close()
        two.close()
    assert [[t.token_ids for t in g.leaves] for g in side] == [[t.token_ids for t in g.leaves] for g in serial]
    assert [g.leaves[0].task_id for g in side] == ["math-train-0-00000", "math-train-0-00001"]
    assert Slow.peak == 2  # the two groups' tool calls overlapped


def test_held_out_evaluation_on_the_workers_is_the_same_on_one_worker_or_two(tmp_path: Path) -> None:
    """Evaluation is played by the rollout source; each chunk reseeds from its episodes, so the
    report depends on the weights and the episodes only, and the eval split's tasks are played."""
    from prm_gym.agents.chat import ChatTemplate
    from prm_gym.agents.hf import HFPolicy
    from prm_gym.training.evaluation import evaluate
    from prm_gym.training.sources import worker_spec

    cfg = small(tmp_path, steps=1)
    cfg = replace(cfg, eval=replace(cfg.eval, num_tasks=20, samples=2, temperature=1.0))
    learner = HFPolicy.from_id(cfg.policy, seed=5)
    chat = ChatTemplate(learner.tokenizer, tools_block=cfg.tools_prompt)
    spec = worker_spec(cfg)
    assert spec.eval_envs[cfg.env_ids[0]]["split"] == "test"
    reports = []
    for n in (1, 2):
        source = LocalRollouts(spec, [None] * n)
        try:
            source.publish(learner.model.state_dict(), 1)
            reports.append(evaluate(learner, chat, cfg, source))
        finally:
            source.close()
    one, two = ({k: v for k, v in r.items() if k != "episodes_per_s"} for r in reports)
    assert one == two and one["tasks_scored"] == 20.0
