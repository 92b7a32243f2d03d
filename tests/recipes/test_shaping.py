"""Judge-expression combination modes and overlong shaping, applied by training/batch.py."""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import pytest
import torch

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import Trajectory, TurnRecord, rollout
from prm_gym.core.policy import FakePolicy
from prm_gym.rewards.combine import CombineConfig, combine_group
from prm_gym.training.advantages import batch_std_advantages, group_advantages
from prm_gym.training.batch import Grouping, build_batch, compute_advantages, shaped_returns
from prm_gym.training.config import LossConfig
from prm_gym.training.shaping import combined_returns, is_active, overlong_penalty

KW: dict[str, Any] = {"levels": [1], "num_tasks": 10, "max_turns": 3}


def solver(prompt: str, call: int) -> str:
    """Even first calls: a malformed tool call, then a wrong answer; odd: the calculator, then its result."""
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt)
    if results:
        return f"<answer>{results[-1]}</answer>"
    if "oops" in prompt:
        return "<answer>-1</answer>"
    if call % 2 == 0:
        return "<tool_call>{oops</tool_call>"
    expr = re.findall(r"What is (.*?)\?", prompt)[-1]
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expr}"}}}}</tool_call>'


def play(tok: Any, judge: str, n: int = 4) -> tuple[list[Trajectory], gym.Env]:
    env = gym.make("prm/Math-v0", judge=judge, **KW)
    tid = env.unwrapped.tasks.ids[0]  # type: ignore[attr-defined]
    make = [gym.make("prm/Math-v0", judge=judge, **KW) for _ in range(n)]
    trajs = rollout(make, FakePolicy(tok, solver), ChatTemplate(tok), task_ids=[tid] * n, seeds=list(range(n)))
    return trajs, env


def test_combined_returns_sum_to_combine_group_per_trajectory() -> None:
    process = [[0.2, -0.5, 0.1], [0.3], [0.0, 0.4]]
    outcomes = [1.0, 0.0, 1.0]
    cfg = CombineConfig(credit="min", gate=0.5, norm="zscore", clip=0.8)
    outs, procs = combined_returns(outcomes, process, [0, 0, 0], cfg)
    expected = combine_group(process, outcomes, cfg)
    for o, p, e in zip(outs, procs, expected, strict=True):
        assert sum(p) + o == pytest.approx(sum(e))
        assert p[:-1] == pytest.approx(e[:-1])
    # two groups are combined independently: group 1 alone equals a one-group call
    outs2, _ = combined_returns([*outcomes, 5.0, 7.0], [*process, [1.0], [2.0]], [0, 0, 0, 1, 1], cfg)
    assert outs2[:3] == pytest.approx(outs)
    assert outs2[3:] == pytest.approx([-1.0, 1.0])  # z-scored within group 1 only


def test_is_active_only_for_non_default_options() -> None:
    assert not is_active(None) and not is_active(CombineConfig())
    assert is_active(CombineConfig(gate=1.0)) and is_active(CombineConfig(credit="min"))


def test_env_judge_gate_removes_process_rewards_of_failed_episodes(tiny_tokenizer: Any) -> None:
    trajs, env = play(tiny_tokenizer, "rule/math_equiv + 0.5*rule/format ; gate=1")
    combine = env.unwrapped.judge_spec.combine_config()  # type: ignore[attr-defined]
    assert combine.gate == 1.0
    grouping = Grouping([0] * len(trajs))
    plain = shaped_returns(trajs, grouping, LossConfig())
    gated = shaped_returns(trajs, grouping, LossConfig(), combine)
    assert any(min(p) < 0 for o, p in plain if o < 1)  # failures had format penalties ...
    for (o, p), (go, gp) in zip(plain, gated, strict=True):
        assert go == o
        assert gp == (p if o >= 1 else [0.0] * len(p))  # ... which the gate removes
    cfg = LossConfig(process_coef=1.0)
    adv_plain, _, _ = compute_advantages(trajs, grouping, cfg)
    adv_gated, _, _ = compute_advantages(trajs, grouping, cfg, combine)
    assert not torch.allclose(adv_plain, adv_gated)
    batch = build_batch(trajs, grouping, cfg, combine=combine)
    assert batch.advantages.abs().sum() > 0


def test_min_credit_gives_every_turn_the_worst_future_reward(tiny_tokenizer: Any) -> None:
    trajs, _ = play(tiny_tokenizer, "rule/math_equiv + rule/format ; credit=min")
    grouping = Grouping([0] * len(trajs))
    cfg = CombineConfig(credit="min")
    for (_, p), traj in zip(shaped_returns(trajs, grouping, LossConfig(), cfg), trajs, strict=True):
        raw = [t.reward - t.terms.get("outcome", 0.0) for t in traj.turns]
        to_go = [sum(p[i:]) for i in range(len(p))]
        assert to_go == pytest.approx([min(raw[i:]) for i in range(len(raw))])


def _traj(lengths: list[int]) -> Trajectory:
    t = Trajectory("x", "p")
    pos = 0
    for n in lengths:
        t.turns.append(TurnRecord("a", "o", 0.0, {}, "ok", pos, pos + n, {}))
        pos += n
    return t


def test_overlong_penalty_is_linear_in_the_buffer() -> None:
    assert overlong_penalty(_traj([10, 20]), 32, 8, 1.0) == 0.0
    assert overlong_penalty(_traj([28]), 32, 8, 1.0) == pytest.approx(-0.5)
    assert overlong_penalty(_traj([32, 32]), 32, 8, 0.5) == pytest.approx(-1.0)
    assert overlong_penalty(_traj([32]), 32, 0, 1.0) == 0.0
    trajs = [_traj([32]), _traj([4])]
    out = shaped_returns(trajs, Grouping([0, 0]), LossConfig(overlong_buffer=8), max_new_tokens=32)
    assert [o for o, _ in out] == [-1.0, 0.0]


def test_batch_std_divides_group_centred_returns_by_one_batch_std() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.01, 0.0])  # group 1 is nearly constant
    groups = torch.tensor([0, 0, 1, 1])
    lite = batch_std_advantages(rewards, groups)
    per_group = group_advantages(rewards, groups)
    assert float(per_group[2]) == pytest.approx(float(per_group[0]), rel=1e-3)  # per-group std blows group 1 up
    assert lite[2] < 0.05 * lite[0]  # one batch std keeps it small
    centred = torch.tensor([0.5, -0.5, 0.005, -0.005], dtype=torch.float64)
    assert lite.double().tolist() == pytest.approx((centred / centred.std()).tolist(), abs=1e-5)
