"""One scoring function (prm_gym.rewards.score) for the env step and the group scorer, and each
judge's declared kind (outcome or process)."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import pytest

from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.core.errors import ConfigError, InfraError
from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards.protocol import reward_kind
from prm_gym.rewards.registry import make_judge, register_judge
from prm_gym.rewards.score import VerdictMemo, plan, score_turns
from prm_gym.rewards.testing import FakeJudge
from prm_gym.rewards.types import Turn, Verdict
from prm_gym.training.group_judges import score_deferred

TASK = Task("t", "2+2?", "4")


def _turn(index: int, final: bool) -> Turn:
    action = "<answer>4</answer>" if final else "thinking"
    return Turn(TASK, index, action, parse_action(action), (), (), final)


TURNS = [_turn(0, False), _turn(1, False), _turn(2, True)]


def test_weights_scopes_and_sums() -> None:
    per_turn = FakeJudge("f/turn", lambda t: 0.5, term="process")
    final = FakeJudge("f/final", lambda t: 1.0, term="outcome", scope="final")
    out = score_turns(plan([(2.0, per_turn), (3.0, final)]), TURNS, zero={"reward_outcome": 0.0})
    assert [terms for terms, _, _, _ in out] == [
        {"reward_outcome": 0.0, "reward_process": 1.0},
        {"reward_outcome": 0.0, "reward_process": 1.0},
        {"reward_outcome": 3.0, "reward_process": 1.0},
    ]
    assert [reward for _, _, _, reward in out] == [1.0, 1.0, 4.0] and not any(infra for _, _, infra, _ in out)
    assert "f/final" not in out[0][1] and out[2][1]["f/final"]["score"] == 1.0
    assert (per_turn.calls, final.calls) == (3, 1)  # one batch call each over the turns it sees


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_score_is_infra_never_a_reward(bad: float) -> None:
    judge = FakeJudge("f/nan", lambda t: bad)
    ok = FakeJudge("f/ok", lambda t: 1.0, term="format")
    for turns in (TURNS[:1], TURNS):  # the env's one turn and a group's batch alike
        out = score_turns(plan([(1.0, judge), (1.0, ok)]), turns)
        assert all(infra and "non-finite" in judges["f/nan"]["error"] for _, judges, infra, _ in out)
        assert all(terms == {"reward_format": 1.0} and reward == 1.0 for terms, _, _, reward in out)


def test_an_outside_failure_is_infra_and_a_bug_raises_with_a_note() -> None:
    def down(turn: Turn) -> float:
        raise InfraError("judge server unreachable")

    out = score_turns(plan([(1.0, FakeJudge("f/down", down))]), TURNS)
    assert all(infra and "unreachable" in judges["f/down"]["error"] and r == 0.0 for _, judges, infra, r in out)

    def buggy(turn: Turn) -> float:
        raise TypeError("oops")

    with pytest.raises(TypeError) as info:
        score_turns(plan([(1.0, FakeJudge("f/bug", buggy))]), TURNS[:1])
    assert "raised by judge 'f/bug' on task 't', turn 1: a bug in the judge" in info.value.__notes__


def test_verdicts_are_memoised_by_content_and_a_short_batch_is_a_bug() -> None:
    judge = FakeJudge("f/memo", lambda t: 0.25)
    memo = VerdictMemo(limit=2)
    score_turns(plan([(1.0, judge)]), TURNS[:2], memo=memo)
    assert score_turns(plan([(1.0, judge)]), TURNS[:2], memo=memo)[1][3] == 0.25
    assert judge.calls == 2 and len(memo) == 2
    score_turns(plan([(1.0, judge)]), TURNS[2:], memo=memo)
    assert len(memo) == 2  # the oldest evicted

    class Short(FakeJudge):
        def score(self, turns: Any) -> list[Verdict]:
            return super().score(turns)[:-1]

    with pytest.raises(RuntimeError, match="returned 2 verdicts for 3 turns"):
        score_turns(plan([(1.0, Short("f/short"))]), TURNS)


class _NanGroup(FakeJudge):
    group_batched = True


register_judge("scoretest/nan_group", lambda: _NanGroup("scoretest/nan_group", lambda t: math.nan), overwrite=True)


def test_the_group_scorer_treats_a_non_finite_verdict_like_env_step() -> None:
    """Before, env.step flagged a NaN verdict infra_error while the group scorer raised out of the worker."""
    env = gym.make("prm/Math-v0", levels=[1], num_tasks=2, judge="rule/format + scoretest/nan_group")
    try:
        assert env.unwrapped.defer_group_judges() == ["scoretest/nan_group"]
        env.reset(options={"task_id": "math-train-0-00000"})
        _, reward, _, _, info = env.step("thinking")
        traj = Trajectory("math-train-0-00000", "p")
        traj.turns.append(TurnRecord("thinking", "", reward, {"format": -1.0}, "ok", 0, 1, dict(info)))
        assert score_deferred([env], [traj]) == 1
        rec = traj.turns[0]
        assert rec.status == rec.info["reward_status"] == "infra_error"
        assert "non-finite" in rec.info["judge"]["scoretest/nan_group"]["error"] and rec.reward == reward
    finally:
        env.close()


def test_kinds_default_to_the_scope_and_judges_may_declare_them() -> None:
    assert reward_kind(make_judge("rule/math_equiv")) == "outcome"
    assert reward_kind(make_judge("rule/format")) == "process"
    for jid in ("rule/sql_syntax", "rule/sql_schema_link", "rule/sql_result_overlap"):  # partial credit, final turn
        assert reward_kind(make_judge(jid)) == "outcome", jid
    assert reward_kind(make_judge("rule/sql_explore")) == "process"
    declared = FakeJudge("f/declared", scope="turn")
    declared.kind = "outcome"  # type: ignore[attr-defined]
    assert reward_kind(declared) == "outcome"
    declared.kind = "reward"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="kind must be 'outcome' or 'process'"):
        reward_kind(declared)


register_judge("scoretest/outcome_each_turn", lambda: FakeJudge("scoretest/outcome_each_turn", term="outcome"))


def test_an_env_reports_each_terms_kind_and_refuses_a_mixed_term() -> None:
    env = gym.make("prm/Math-v0", levels=[1], num_tasks=2, judge="rule/math_equiv + rule/tool")
    assert env.unwrapped.reward_kinds == {"outcome": "outcome", "tool": "process"}
    env.close()
    with pytest.raises(ConfigError, match=r"'rule/math_equiv' \(outcome\) and 'scoretest/outcome_each_turn'"):
        gym.make("prm/Math-v0", levels=[1], num_tasks=2, judge="rule/math_equiv + scoretest/outcome_each_turn")
