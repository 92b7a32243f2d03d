"""PRIME in the training loop: the PRM takes its own step every step and its leave-one-out token
advantages replace the group-normalised outcome advantage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from prm_gym.agents.hf import HFPolicy
from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.rewards.prime import PRMSample, prime_advantages
from prm_gym.training.batch import Grouping, build_batch
from prm_gym.training.config import LossConfig
from prm_gym.training.metrics import read_metrics
from prm_gym.training.prime import PrimeCredit
from prm_gym.training.trainer import train
from tests.training.test_trainer import small


def _traj(tok: Any, answer: str, outcome: float) -> Trajectory:
    t = Trajectory("t", "p")
    t.extend(tok.encode("question", add_special_tokens=False), trained=False)
    start = len(t.token_ids)
    t.extend(tok.encode(answer, add_special_tokens=False), trained=True)
    t.turns.append(TurnRecord(answer, "", outcome, {"outcome": outcome}, "ok", start, len(t.token_ids), {}))
    return t


def test_batch_advantages_become_primes_leave_one_out_estimate(tiny_policy: HFPolicy) -> None:
    tok = tiny_policy.tokenizer
    trajs = [_traj(tok, "<answer>7</answer>", 1.0), _traj(tok, "<answer>9</answer>", 0.0)]
    grouping = Grouping([0, 0])
    loss = LossConfig()
    batch = build_batch(trajs, grouping, loss)
    credit = PrimeCredit(HFPolicy(tiny_policy.model, tok), loss)
    samples = [
        PRMSample(t.token_ids, [bool(m) for m in t.loss_mask], o) for t, o in zip(trajs, (1.0, 0.0), strict=True)
    ]
    expected = prime_advantages(credit.prm.token_rewards(samples), [1.0, 0.0], loss.gamma)
    metrics = credit.apply(batch, trajs, grouping)
    assert credit.prm.steps == 1 and metrics["prime/loss"] > 0
    for i, t in enumerate(trajs):
        positions = [p for p, m in enumerate(t.loss_mask) if m and p > 0]
        assert batch.advantages[i, positions].tolist() == torch.tensor(expected[i]).tolist()
    # the correct episode's tokens get a positive advantage, the wrong one's negative (outcome term dominates)
    assert all(a > 0 for a in expected[0]) and all(a < 0 for a in expected[1])


def test_training_with_prime_updates_the_prm_every_step(tmp_path: Path) -> None:
    train(small(tmp_path, steps=2, loss=LossConfig(micro_batch_size=2, prime=True, prime_lr=1e-4)))
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    assert len(rows) == 2 and all("prime/loss" in r and r["prime/loss"] > 0 for r in rows)
