"""IGPO as its authors run it (GuoqingWang1/IGPO): rewards z-scored in the group before the
discounted sum (joint / separate), -2.0 for an episode without an answer, and the config's guard."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from test_trainer import small as trainer_small  # the suite's small run (tests/training is on sys.path)

from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.core.errors import ConfigError
from prm_gym.training.advantages import igpo_advantages
from prm_gym.training.batch import Grouping, compute_advantages
from prm_gym.training.config import EvalConfig, LossConfig, SamplingConfig

# one group: A gains 0.2 then answers (outcome 1.0); B gains -0.1 and 0.3 then answers (outcome 0.0)
REWARDS = torch.tensor([[0.2, 1.0, 0.0], [-0.1, 0.3, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[True, True, False], [True, True, True]])
GROUPS = torch.tensor([0, 0])
EPS = 1e-6


def _z(x: float, pool: list[float]) -> float:
    mean = sum(pool) / len(pool)
    std = math.sqrt(sum((p - mean) ** 2 for p in pool) / len(pool) + 1e-8)  # population std, as the authors
    return (x - mean) / (std + EPS)


def test_joint_mode_z_scores_outcomes_and_gains_together_then_sums() -> None:
    pool = [0.2, 1.0, -0.1, 0.3, 0.0]
    adv = igpo_advantages(REWARDS, MASK, GROUPS, mode="joint", gamma=0.5)
    a = [_z(0.2, pool) + 0.5 * _z(1.0, pool), _z(1.0, pool)]
    b2 = _z(0.0, pool)
    b = [_z(-0.1, pool) + 0.5 * (_z(0.3, pool) + 0.5 * b2), _z(0.3, pool) + 0.5 * b2, b2]
    assert adv[0, :2].tolist() == pytest.approx(a, rel=1e-5) and float(adv[0, 2]) == 0.0
    assert adv[1].tolist() == pytest.approx(b, rel=1e-5)


def test_separate_mode_z_scores_outcomes_and_gains_apart() -> None:
    outs, gains = [1.0, 0.0], [0.2, -0.1, 0.3]
    adv = igpo_advantages(REWARDS, MASK, GROUPS, mode="separate", gamma=1.0)
    assert adv[0, 1] == pytest.approx(_z(1.0, outs)) and adv[1, 2] == pytest.approx(_z(0.0, outs))
    assert adv[0, 0] == pytest.approx(_z(0.2, gains) + _z(1.0, outs), rel=1e-5)
    assert adv[1, 0] == pytest.approx(_z(-0.1, gains) + _z(0.3, gains) + _z(0.0, outs), rel=1e-5)


@pytest.mark.parametrize("mode", ["joint", "separate"])
def test_a_judge_weight_is_normalised_away(mode: str) -> None:
    """One judge gives gains and outcome with one weight: 0.1 or 1.0 gives the same advantages."""
    one = igpo_advantages(REWARDS, MASK, GROUPS, mode=mode)
    tenth = igpo_advantages(0.1 * REWARDS, MASK, GROUPS, mode=mode)
    assert torch.allclose(one, tenth, atol=1e-4)


def test_gains_scaled_alone_change_joint_but_not_separate() -> None:
    scaled = REWARDS.clone()
    scaled[0, 0], scaled[1, :2] = 0.02, torch.tensor([-0.01, 0.03])
    for mode, same in (("separate", True), ("joint", False)):
        a, b = igpo_advantages(REWARDS, MASK, GROUPS, mode=mode), igpo_advantages(scaled, MASK, GROUPS, mode=mode)
        assert torch.allclose(a, b, atol=1e-4) is same


def test_a_zero_gain_is_left_out_of_the_statistics_and_stays_zero() -> None:
    rewards = torch.tensor([[0.0, 0.4, 1.0], [0.2, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(2, 3, dtype=torch.bool)
    adv = igpo_advantages(rewards, mask, GROUPS, mode="separate")
    gains = [0.4, 0.2]
    assert adv[0, 0] == pytest.approx(adv[0, 1])  # 0 + (the rest): the zero gain adds nothing
    assert adv[0, 1] - adv[0, 2] == pytest.approx(_z(0.4, gains), rel=1e-5)


def _traj(process: list[float], outcome: float, *, terminated: bool = True, truncated: bool = False) -> Trajectory:
    turns = []
    for i, p in enumerate(process):
        o = outcome if i == len(process) - 1 else 0.0
        turns.append(TurnRecord(f"a{i}", "o", p + o, {"process": p, "outcome": o}, "ok", 2 * i + 1, 2 * i + 2, {}))
    return Trajectory(
        "t", "p", token_ids=list(range(2 * len(process) + 1)), turns=turns, terminated=terminated, truncated=truncated
    )


def test_an_episode_without_an_answer_scores_minus_two_on_its_last_turn() -> None:
    trajs = [_traj([0.2, 0.0], 1.0), _traj([0.1, 0.3], 0.0, terminated=False, truncated=True)]
    cfg = LossConfig(igpo="separate", outcome_terms=("outcome",))
    adv, _, _ = compute_advantages(trajs, Grouping([0, 0]), cfg)
    # the truncated episode's last turn gain (0.3) is replaced by -2.0, the answered one keeps its outcome
    rewards = torch.tensor([[0.2, 1.0], [0.1, -2.0]], dtype=torch.float64)
    want = igpo_advantages(rewards, torch.ones(2, 2, dtype=torch.bool), GROUPS, mode="separate")
    assert torch.allclose(adv, want)
    other, _, _ = compute_advantages(trajs, Grouping([0, 0]), LossConfig(igpo="separate", igpo_no_answer=-5.0))
    rewards[1, 1] = -5.0
    assert torch.allclose(other, igpo_advantages(rewards, torch.ones(2, 2, dtype=torch.bool), GROUPS, mode="separate"))


def test_igpo_refuses_a_process_coefficient_it_would_ignore() -> None:
    with pytest.raises(ConfigError, match="process_coef"):
        LossConfig(igpo="joint", process_coef=0.5)
    assert LossConfig(igpo="off", process_coef=0.5).process_coef == 0.5


def test_train_agent_runs_igpo_as_its_authors_do_on_search(tmp_path: Path) -> None:
    """The whole path: prm/Search-v0 with progress/info_gain over the gold span under the weights
    being trained (``policy="current"``), the outcome on the answer turn, --loss.igpo joint."""
    from prm_gym.core.device_guard import device_guard
    from prm_gym.training.metrics import read_metrics
    from prm_gym.training.trainer import train

    authors = {"policy": "current", "final": "outcome", "belief": "span", "outcome": "f1"}
    kw = {"num_tasks": 20, "max_turns": 3, "judge_kwargs": {"progress/info_gain": authors}}
    cfg = trainer_small(
        tmp_path,
        env="prm/Search-v0",
        env_kwargs=json.dumps(kw),
        judge="progress/info_gain",
        tasks_per_step=2,
        checkpoint_every=0,
        device="cpu",
        sampling=SamplingConfig(max_new_tokens=16),
        eval=EvalConfig(num_tasks=2, samples=1),
        loss=LossConfig(micro_batch_size=2, igpo="joint"),
    )
    with device_guard():  # the IGPO path names the device of every tensor it makes
        train(cfg)
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["loss"]) for r in rows)
