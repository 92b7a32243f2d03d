"""IGPO's information gain in the training loop: a rollout worker scores a GRPO group's turns in
one batched forward pass, and the rewards equal the per-turn path's (the judge inside env.step)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from prm_gym.agents.rollout import Trajectory
from prm_gym.core.policy import SamplingParams
from prm_gym.rewards.info_gain import InfoGainJudge
from prm_gym.rewards.registry import register_judge
from prm_gym.rewards.testing import FakeJudge, failing
from prm_gym.rewards.types import Turn, Verdict
from prm_gym.training.group_judges import score_deferred
from prm_gym.training.worker import RolloutWorker, WorkerSpec

JUDGE = "rule/math_equiv + 0.1*rule/format + 0.5*progress/info_gain"
SAMPLING = SamplingParams(max_new_tokens=8, temperature=1.0)


@pytest.fixture(scope="module")
def judge_policy() -> Any:
    """The model whose belief IGPO measures: its own tiny model (not the sampling policy), shared
    by every env's judge so that one forward hook counts all of them."""
    from prm_gym.agents.hf import HFPolicy

    return HFPolicy.from_id("hf:tiny", seed=1)


def _spec(judge_policy: Any, group_judges: bool = True) -> WorkerSpec:
    kwargs = {
        "levels": [1],
        "num_tasks": 4,
        "max_turns": 3,
        "judge": JUDGE,
        "judge_kwargs": {"progress/info_gain": {"policy": judge_policy, "final": "gain"}},
    }
    return WorkerSpec("prm/Math-v0", kwargs, group_judges=group_judges)


def _judges(worker: RolloutWorker) -> list[InfoGainJudge]:
    out = []
    for env in worker.envs["prm/Math-v0"]:
        judge = next(j for _, j in env.unwrapped.judges if j.name == "progress/info_gain")
        assert isinstance(judge, InfoGainJudge)
        out.append(judge)
    return out


def _measure(worker: RolloutWorker, task: str, seeds: list[int]) -> tuple[list[Trajectory], int]:
    """One group of ``task``; the forward passes the info-gain model makes during it."""
    judges = _judges(worker)
    for judge in judges:  # every context computed in the measured group, none from a cache
        judge.cache_size, judge._cache = 0, type(judge._cache)()
    calls: list[int] = []
    handle = judges[0].policy.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        trajs = worker.play(task, seeds, SAMPLING, 2048).leaves
    finally:
        handle.remove()
    assert isinstance(trajs, list)
    return trajs, len(calls)


def test_a_group_is_one_forward_pass_and_scores_like_every_turn(tiny_policy: Any, judge_policy: Any) -> None:
    seeds = [11, 12, 13]
    batched = RolloutWorker(_spec(judge_policy), 0, policy=tiny_policy)
    per_turn = RolloutWorker(_spec(judge_policy, group_judges=False), 0, policy=tiny_policy)
    for worker in (batched, per_turn):  # a first group builds the envs (verdict memos are per task)
        worker.play("math-train-0-00000", seeds, SAMPLING, 2048)

    for task in ("math-train-0-00001", "math-train-0-00002"):
        got, passes = _measure(batched, task, seeds)
        want, passes_per_turn = _measure(per_turn, task, seeds)
        turns = sum(len(t.turns) for t in got)
        assert passes == 1  # the whole group: every turn's before and after contexts, one padded pass
        assert passes_per_turn == turns  # inside env.step: one pass per turn
        assert turns > len(seeds)  # several turns per episode: batched across turns and episodes
        assert [[r.action for r in t.turns] for t in got] == [[r.action for r in t.turns] for t in want]
        for g, w in zip(got, want, strict=True):
            for a, b in zip(g.turns, w.turns, strict=True):
                assert a.reward == pytest.approx(b.reward, abs=1e-5)
                assert a.terms == pytest.approx(b.terms, abs=1e-5)
                assert a.info["reward_process"] == pytest.approx(b.info["reward_process"], abs=1e-5)
                gain = a.info["judge"]["progress/info_gain"]["score"]
                assert gain == pytest.approx(b.info["judge"]["progress/info_gain"]["score"], abs=1e-5)
        gains = [r.info["judge"]["progress/info_gain"]["score"] for t in got for r in t.turns]
        assert any(abs(x) > 1e-6 for x in gains)  # real gains, not zeros on both sides


def test_only_the_first_envs_judge_loads_a_model(tiny_policy: Any) -> None:
    """Envs whose judge names a model id load it lazily: batched, only the first env's is used."""
    kwargs = {"levels": [1], "num_tasks": 2, "max_turns": 2, "judge": "rule/format + progress/info_gain"}
    worker = RolloutWorker(WorkerSpec("prm/Math-v0", kwargs), 0, policy=tiny_policy)
    trajs = worker.play("math-train-0-00000", [1, 2], SAMPLING, 2048).leaves
    assert [j._policy is not None for j in _judges(worker)] == [True, False]
    assert all("score" in r.info["judge"]["progress/info_gain"] for t in trajs for r in t.turns)


def test_no_deferred_judge_means_nothing_to_do(tiny_policy: Any) -> None:
    worker = RolloutWorker(
        WorkerSpec("prm/Math-v0", {"levels": [1], "num_tasks": 2, "max_turns": 2}), 0, policy=tiny_policy
    )
    trajs = worker.play("math-train-0-00000", [1, 2], SAMPLING, 2048).leaves
    assert isinstance(trajs, list)
    assert score_deferred(worker.envs["prm/Math-v0"][:2], trajs) == 0


class _GroupFake(FakeJudge):
    """A group-batched fake that records the size of every ``score`` call."""

    group_batched = True
    batches: ClassVar[list[int]] = []

    def score(self, turns: Any) -> list[Verdict]:
        _GroupFake.batches.append(len(turns))
        return super().score(turns)


def _turn_number(turn: Turn) -> float:
    return 0.25 * (turn.index + 1)


register_judge("test/group_turn", lambda **kw: _GroupFake("test/group_turn", _turn_number, **kw), overwrite=True)
register_judge("test/group_fail", lambda: _GroupFake("test/group_fail", failing("down")), overwrite=True)
register_judge(
    "test/group_final", lambda: _GroupFake("test/group_final", scope="final", term="outcome"), overwrite=True
)


def test_one_call_per_group_and_the_verdicts_land_where_env_step_puts_them(tiny_policy: Any) -> None:
    kwargs = {"levels": [1], "num_tasks": 2, "max_turns": 3, "judge": "rule/format + 2*test/group_turn"}
    worker = RolloutWorker(WorkerSpec("prm/Math-v0", kwargs), 0, policy=tiny_policy)
    _GroupFake.batches = []
    trajs = worker.play("math-train-0-00000", [1, 2, 3], SAMPLING, 2048).leaves
    assert isinstance(trajs, list)
    assert _GroupFake.batches == [sum(len(t.turns) for t in trajs)]  # one call, every turn of the group
    for t in trajs:
        for k, rec in enumerate(t.turns):
            assert rec.info["judge"]["test/group_turn"]["score"] == 0.25 * (k + 1)
            assert rec.terms["process"] == rec.info["reward_process"] == 2 * 0.25 * (k + 1)
            assert rec.reward == pytest.approx(rec.terms["process"] + rec.terms["format"])


def test_a_failed_group_call_is_infra_on_every_turn_and_final_judges_see_final_turns(tiny_policy: Any) -> None:
    kwargs = {"levels": [1], "num_tasks": 2, "max_turns": 2, "judge": "test/group_fail + test/group_final"}
    worker = RolloutWorker(WorkerSpec("prm/Math-v0", kwargs), 0, policy=tiny_policy)
    _GroupFake.batches = []
    trajs = worker.play("math-train-0-00000", [1, 2], SAMPLING, 2048).leaves
    assert isinstance(trajs, list)
    assert all(
        r.status == "infra_error" and "down" in r.info["judge"]["test/group_fail"]["error"]
        for t in trajs
        for r in t.turns
    )
    finals = sum(t.terminated for t in trajs)  # the random policy rarely answers: often no final turn
    assert _GroupFake.batches == [sum(len(t.turns) for t in trajs)] + ([finals] if finals else [])


def test_env_defers_only_while_asked() -> None:
    import gymnasium as gym

    env = gym.make("prm/Math-v0", levels=[1], num_tasks=2, judge="rule/format + 2*test/group_turn")
    try:
        assert env.unwrapped.defer_group_judges() == ["test/group_turn"]
        env.reset(options={"task_id": "math-train-0-00000"})
        _, reward, _, _, info = env.step("no action")
        assert reward == -1.0 and info["reward_process"] == 0.0  # the format penalty alone
        assert info["judge"]["test/group_turn"] == {"deferred": 1}
        turns = env.unwrapped.take_deferred_turns()
        assert [t.index for t in turns] == [0] and env.unwrapped.take_deferred_turns() == []
        assert env.unwrapped.defer_group_judges(False) == []
        _, reward, _, _, info = env.step("no action")
        assert reward == -1.0 + 2 * 0.5 and info["judge"]["test/group_turn"]["score"] == 0.5  # turn 2
        assert env.unwrapped.take_deferred_turns() == []
    finally:
        env.close()
