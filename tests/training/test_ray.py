"""Ray rollout workers on a real local Ray cluster (started once for this module)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

ray = pytest.importorskip("ray")

import prm_gym  # noqa: E402,F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate  # noqa: E402
from prm_gym.agents.hf import HFPolicy  # noqa: E402
from prm_gym.agents.rollout import rollout  # noqa: E402
from prm_gym.core.policy import SamplingParams  # noqa: E402
from prm_gym.training.cli import main  # noqa: E402
from prm_gym.training.distributed import RayRollouts  # noqa: E402
from prm_gym.training.worker import WorkerSpec  # noqa: E402

GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)
# One xdist worker runs this module (make test passes --dist loadgroup): one Ray cluster, not one per worker.
pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def pool() -> Iterator[RayRollouts]:
    spec = WorkerSpec("prm/Math-v0", seed=7, eval_envs={"prm/Math-v0": {"split": "test"}})
    with RayRollouts(spec, num_workers=2, max_retries=1, cpus_per_worker=0.5) as p:
        yield p


@pytest.mark.slow
def test_workers_that_cannot_be_placed_fail_with_the_cpu_count(pool: RayRollouts) -> None:
    from prm_gym.core.errors import InfraError

    with pytest.raises(InfraError, match=r"need 64 CPUs and the cluster had [\d.]+ free"):
        RayRollouts(WorkerSpec("prm/Math-v0"), num_workers=1, cpus_per_worker=64, start_timeout_s=3)
    assert ray.is_initialized()  # the module's cluster is still up for the other tests


def _task_ids(n: int) -> list[str]:
    env = gym.make("prm/Math-v0")
    ids = list(env.unwrapped.tasks.ids)[:n]  # type: ignore[attr-defined]
    env.close()
    return ids


def test_ray_workers_play_exactly_what_the_local_loop_plays(pool: RayRollouts) -> None:
    local = HFPolicy.from_id("hf:tiny", seed=123)
    pool.publish(local.model.state_dict(), version=5)
    ids = _task_ids(3)
    groups, stats = pool.collect([(t, [11, 12]) for t in ids], GREEDY, 1024)
    assert stats.worker_deaths == stats.dropped_groups == 0
    for task_id, unit in zip(ids, groups, strict=True):
        group = unit.leaves
        envs_ = [gym.make("prm/Math-v0") for _ in range(2)]
        expected = rollout(
            envs_,
            local,
            ChatTemplate(local.tokenizer),
            seeds=[11, 12],
            task_ids=[task_id] * 2,
            sampling=GREEDY,
            max_context_tokens=1024,
        )
        for e in envs_:
            e.close()
        assert [t.token_ids for t in group] == [t.token_ids for t in expected]
        assert [t.total_reward for t in group] == [t.total_reward for t in expected]
        assert all(t.policy_version == 5 and t.task_id == task_id for t in group)


def test_ray_workers_play_held_out_episodes_exactly_as_this_process_would(pool: RayRollouts) -> None:
    local = HFPolicy.from_id("hf:tiny", seed=321)
    pool.publish(local.model.state_dict(), version=6)
    probe = gym.make("prm/Math-v0", split="test")
    ids = list(probe.unwrapped.tasks.ids)[:40]  # type: ignore[attr-defined]
    probe.close()
    assert ids[0].startswith("math-test")
    got = pool.evaluate("prm/Math-v0", [(t, 10_000) for t in ids], GREEDY, 1024)  # two chunks, two actors
    envs_ = [gym.make("prm/Math-v0", split="test") for _ in ids]
    expected = rollout(
        envs_,
        local,
        ChatTemplate(local.tokenizer),
        seeds=[10_000] * 40,
        task_ids=ids,
        sampling=GREEDY,
        max_context_tokens=1024,
    )
    for e in envs_:
        e.close()
    assert [t.token_ids for t in got] == [t.token_ids for t in expected]
    assert [t.task_id for t in got] == ids and all(t.policy_version == 6 for t in got)


def test_a_dead_worker_is_replaced_and_its_group_retried(pool: RayRollouts) -> None:
    pool.publish(HFPolicy.from_id("hf:tiny", seed=3).model.state_dict(), version=5)
    before = ray.get(pool.actors[0].ping.remote())
    pool.kill_worker(0)
    groups, stats = pool.collect([(t, [1, 2]) for t in _task_ids(4)], GREEDY, 1024)
    assert len(groups) == 4 and all(len(g.leaves) == 2 for g in groups)
    assert stats.worker_deaths == 1 and stats.retried_groups == 1 and stats.dropped_groups == 0
    after = ray.get(pool.actors[0].ping.remote())
    assert after != before
    assert all(t.policy_version == 5 for g in groups for t in g.leaves)  # the new worker got the weights


MODES = {
    "sync": [],
    "async": ["--asynchronous.enabled"],
    "tree": ["--algo", "tree-grpo", "--tree.num-trees", "1", "--tree.expand-nodes", "1", "--group-size", "2"],
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_train_agent_backend_ray_runs_and_logs(pool: RayRollouts, tmp_path: Path, mode: str) -> None:
    out = tmp_path / "run"
    argv = ["--backend", "ray", "--num-workers", "1", "--steps", "3", "--group-size", "2", "--tasks-per-step", "2"]
    argv += ["--output-dir", str(out), "--no-tensorboard", "--no-progress", "--sampling.max-new-tokens", "8"]
    argv += ["--eval.num-tasks", "1", "--eval.samples", "1"]
    assert main(argv + MODES[mode]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/worker_deaths" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    # 2 tasks x 2 episodes; tree: 2 tasks x 1 tree x (1 chain + 1 branch per round) leaves
    assert all(r["trained_rows"] + r.get("excluded_trajectories", 0) == 4 for r in steps)
    # async: later batches were played while the learner trained, at most one version behind
    assert all(r["staleness_max"] <= (1.0 if mode == "async" else 0.0) for r in steps)
    assert (out / "checkpoint.pt").exists()
    assert ray.is_initialized()  # the run joined the module's cluster and left it running
