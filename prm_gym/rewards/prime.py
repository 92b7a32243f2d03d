"""PRIME's online implicit PRM (``prm/prime``): trained on outcome labels while the policy trains.

Cui et al. 2025, *Process Reinforcement through Implicit Rewards* (arXiv 2502.01456), section 3.
The implicit PRM ``pi_phi`` is a causal LM; with a frozen reference ``pi_ref`` (the initial
policy) its token-level process reward is

    r_phi(y_t) = beta * log( pi_phi(y_t | y_<t) / pi_ref(y_t | y_<t) )

and its outcome-level reward is the sum ``r_phi(y) = sum_t r_phi(y_t)``. It is updated online, on
the policy's own rollouts, with the cross-entropy loss on the outcome labels ``r_o(y)``:

    L_CE(phi) = -E[ r_o(y) * log sigmoid(r_phi(y)) + (1 - r_o(y)) * log(1 - sigmoid(r_phi(y))) ].

:class:`OnlineImplicitPRM` holds ``pi_phi`` (initialised from the policy), ``pi_ref`` (a frozen
copy of the initial policy) and its own optimiser; :meth:`OnlineImplicitPRM.update` takes one
step on a batch of trajectories with outcomes. :func:`prime_advantages` is how the token rewards
enter the advantages (the paper's RLOO form, eq. 5): the return of the implicit rewards, each
minus the mean sequence-level implicit reward of the other samples of the group, plus the
leave-one-out outcome advantage.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prm_gym.core.errors import ConfigError, JudgeError
from prm_gym.rewards.lm import messages_before, prompt_ids, scoring_model
from prm_gym.rewards.protocol import Scope
from prm_gym.rewards.types import Turn, Verdict


@dataclass(frozen=True)
class PRMSample:
    """One trajectory for the PRM: its token ids, which of them the policy sampled, its outcome.

    Attributes:
        ids: the whole trajectory's ids (prompt, turns, tool results).
        mask: per id, True when the policy sampled it (only those carry process rewards).
        outcome: the outcome label ``r_o(y)`` in [0, 1].
    """

    ids: Sequence[int]
    mask: Sequence[bool]
    outcome: float

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.mask) or len(self.ids) < 2:
            raise ValueError(f"PRMSample: {len(self.ids)} ids and {len(self.mask)} mask values (need equal, >= 2).")
        if not (math.isfinite(self.outcome) and 0.0 <= self.outcome <= 1.0):
            raise ValueError(f"PRMSample: outcome must be in [0, 1], got {self.outcome!r}.")


def prime_advantages(
    token_rewards: Sequence[Sequence[float]], outcomes: Sequence[float], gamma: float = 1.0
) -> list[list[float]]:
    """PRIME's per-token advantages for one group of ``K >= 2`` samples (RLOO, eq. 5).

    ``A_t^i = sum_{s>=t} gamma^(s-t) * (r_phi(y_s^i) - mean_{j!=i} r_phi(y^j))
    + r_o(y^i) - mean_{j!=i} r_o(y^j)``, where ``r_phi(y^j)`` is sample j's summed implicit reward.

    Args:
        token_rewards: per sample, the implicit reward of each of its policy tokens.
        outcomes: per sample, its outcome reward.
        gamma: the discount of the process return.
    """
    k = len(token_rewards)
    if k < 2 or len(outcomes) != k:
        raise ValueError(f"prime_advantages needs a group of >= 2 samples with one outcome each (got {k}).")
    seq = [sum(r) for r in token_rewards]
    out = []
    for i, rewards in enumerate(token_rewards):
        base_p = (sum(seq) - seq[i]) / (k - 1)
        base_o = (sum(outcomes) - outcomes[i]) / (k - 1)
        ret, adv = 0.0, []
        for r in reversed(rewards):
            ret = (r - base_p) + gamma * ret
            adv.append(ret + outcomes[i] - base_o)
        out.append(adv[::-1])
    return out


class OnlineImplicitPRM:
    """PRIME's implicit PRM with its own online update (term ``process``, scope ``turn``).

    Args:
        policy: the initial policy (an HFPolicy or an id); ``pi_phi`` and ``pi_ref`` are copies.
        beta: the implicit reward's coefficient.
        lr: the PRM optimiser's (AdamW) learning rate.
        grad_clip: gradient-norm clip of each update (0: none).
        seed: seed for an id naming a randomly initialised model.
    """

    name = "prm/prime"
    term = "process"
    scope: Scope = "turn"

    def __init__(
        self, policy: Any = "hf:tiny", beta: float = 0.05, lr: float = 1e-6, grad_clip: float = 1.0, seed: int = 0
    ):
        import torch

        if not (math.isfinite(beta) and beta > 0 and math.isfinite(lr) and lr > 0 and grad_clip >= 0):
            raise ConfigError("prm/prime: beta and lr must be finite and > 0, grad_clip >= 0.")
        initial = scoring_model(policy, seed)
        self.tokenizer = initial.tokenizer
        self.ref = copy.deepcopy(initial.model).eval().requires_grad_(False)
        self.prm = copy.deepcopy(initial.model).train().requires_grad_(True)
        self.beta, self.grad_clip = beta, grad_clip
        self.optimizer = torch.optim.AdamW(self.prm.parameters(), lr=lr, weight_decay=0.0)
        self.steps = 0

    def _log_ratios(self, samples: Sequence[PRMSample], grad: bool) -> list[Any]:
        """Per sample, ``log pi_phi - log pi_ref`` of each policy token (a tensor; grad if asked)."""
        import torch

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        width = max(len(s.ids) for s in samples)
        device = next(self.prm.parameters()).device
        ids = torch.full((len(samples), width), pad, dtype=torch.long, device=device)
        attn = torch.zeros_like(ids)
        for i, s in enumerate(samples):
            ids[i, : len(s.ids)] = torch.tensor(list(s.ids), device=device)
            attn[i, : len(s.ids)] = 1

        def token_logps(model: Any) -> Any:
            logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
            return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)

        with torch.no_grad():
            ref = token_logps(self.ref)
        with torch.set_grad_enabled(grad):
            mine = token_logps(self.prm)
        out = []
        for i, s in enumerate(samples):
            keep = torch.tensor([bool(m) for m in s.mask[1:]], device=device)
            out.append((mine[i, : len(s.ids) - 1] - ref[i, : len(s.ids) - 1])[keep])
        return out

    def token_rewards(self, samples: Sequence[PRMSample]) -> list[list[float]]:
        """``r_phi(y_t)`` of each policy token of each sample."""
        return [[self.beta * float(x) for x in r.tolist()] for r in self._log_ratios(samples, grad=False)]

    def sequence_rewards(self, samples: Sequence[PRMSample]) -> list[float]:
        """``r_phi(y)``: the sum of each sample's token rewards."""
        return [sum(r) for r in self.token_rewards(samples)]

    def loss(self, samples: Sequence[PRMSample], grad: bool = False) -> Any:
        """``L_CE``: binary cross-entropy of ``sigmoid(r_phi(y))`` against the outcome labels."""
        import torch

        logits = torch.stack([self.beta * r.sum() for r in self._log_ratios(samples, grad)])
        labels = torch.tensor([s.outcome for s in samples], dtype=logits.dtype, device=logits.device)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)

    def update(self, samples: Sequence[PRMSample]) -> float:
        """One optimiser step on ``L_CE`` over ``samples``; the loss before the step."""
        import torch

        if not samples:
            raise ValueError("prm/prime: update needs at least one sample.")
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(samples, grad=True)
        loss.backward()
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.prm.parameters(), self.grad_clip)
        self.optimizer.step()
        self.steps += 1
        return float(loss.detach())

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        """Each turn's process reward: the sum of ``r_phi`` over the turn's own tokens."""
        start = time.perf_counter()
        samples, empty = [], []
        for turn in turns:
            prefix = prompt_ids(self.tokenizer, messages_before(turn))
            target = list(self.tokenizer.encode(turn.action, add_special_tokens=False))
            empty.append(not target)
            samples.append(PRMSample(prefix + target, [False] * len(prefix) + [True] * len(target), 0.0))
        values = self.sequence_rewards(samples)
        latency = time.perf_counter() - start
        out = []
        for v, s, none in zip(values, samples, empty, strict=True):
            if not math.isfinite(v):
                raise JudgeError(f"{self.name}: non-finite implicit reward {v!r}.")
            out.append(Verdict(0.0 if none else v, latency_s=latency, tokens=len(s.ids), detail=f"step {self.steps}"))
        return out
