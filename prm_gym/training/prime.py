"""PRIME's online implicit PRM in the training loop (Cui et al. 2025, *Process Reinforcement through
Implicit Rewards*, arXiv 2502.01456).

Each step: the PRM (:class:`prm_gym.rewards.prime.OnlineImplicitPRM`, initialised from the policy,
reference = the frozen initial policy) gives every sampled token its implicit reward
``r_phi(y_t) = beta * log(pi_phi(y_t | y_<t) / pi_ref(y_t | y_<t))``; then it takes its own optimiser
step on the cross-entropy against the outcome labels; and the token advantages of each group
become PRIME's leave-one-out estimate (eq. 5, :func:`prm_gym.rewards.prime.prime_advantages`),
replacing the group-normalised outcome advantage of the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from prm_gym.agents.rollout import Trajectory
from prm_gym.rewards.prime import OnlineImplicitPRM, PRMSample, prime_advantages
from prm_gym.training.batch import Batch, Grouping, outcome_and_process
from prm_gym.training.config import LossConfig


class PrimeCredit:
    """The loop's PRIME step: token rewards, the PRM's update, the advantages.

    Args:
        policy: the policy at the start of training (the PRM and the reference are copies of it).
        loss: the loss config (``prime_beta``, ``prime_lr``, ``gamma``, ``outcome_terms``).
    """

    def __init__(self, policy: Any, loss: LossConfig):
        self.cfg = loss
        self.prm = OnlineImplicitPRM(policy, beta=loss.prime_beta, lr=loss.prime_lr)

    def apply(self, batch: Batch, trajs: Sequence[Trajectory], grouping: Grouping) -> dict[str, float]:
        """Overwrite ``batch.advantages`` of the trained rows with PRIME's; returns the PRM's metrics."""
        rows = [i for i in range(len(trajs)) if batch.loss_mask[i].sum() > 0]
        if not rows:
            return {}
        outcomes = [min(1.0, max(0.0, outcome_and_process(trajs[i], self.cfg.outcome_terms)[0])) for i in rows]
        samples = [
            PRMSample(trajs[i].token_ids, [bool(m) for m in trajs[i].loss_mask], o)
            for i, o in zip(rows, outcomes, strict=True)
        ]
        rewards = self.prm.token_rewards(samples)  # scored before the update, as the policy saw them
        loss = self.prm.update(samples)
        by_group: dict[int, list[int]] = {}
        for k, i in enumerate(rows):
            by_group.setdefault(grouping.groups[i], []).append(k)
        for members in by_group.values():
            if len(members) < 2:  # no leave-one-out baseline
                for k in members:
                    batch.advantages[rows[k]] = 0.0
                continue
            advs = prime_advantages([rewards[k] for k in members], [outcomes[k] for k in members], self.cfg.gamma)
            for k, adv in zip(members, advs, strict=True):
                i = rows[k]
                mask = torch.tensor([bool(m) for m in trajs[i].loss_mask], device=batch.advantages.device)
                mask[0] = False  # the first id has no prefix, so no implicit reward
                positions = mask.nonzero().squeeze(-1)
                batch.advantages[i] = 0.0
                batch.advantages[i, positions] = torch.tensor(
                    adv, dtype=batch.advantages.dtype, device=batch.advantages.device
                )
        correct = [sum(rewards[k]) for k in range(len(rows)) if outcomes[k] >= 0.5]
        wrong = [sum(rewards[k]) for k in range(len(rows)) if outcomes[k] < 0.5]
        gap = sum(correct) / len(correct) - sum(wrong) / len(wrong) if correct and wrong else 0.0
        return {"prime/loss": loss, "prime/reward_gap": gap}
