"""PRIME's implicit process reward: ``beta * log(pi_theta / pi_ref)`` summed over a turn's tokens.

The implicit PRM (Yuan et al., 2024; used online by PRIME, Cui et al., 2025) needs no step
labels: a token's reward is ``beta * (log pi_theta(y_t | y_<t) - log pi_ref(y_t | y_<t))`` and a
turn's process reward is the sum over the tokens the policy sampled in that turn (prompts and
tool results are not the policy's tokens and are excluded).

* :func:`turn_rewards` is the pure maths over per-token log-probs, for a trainer that already
  holds the sampled ids and both models' log-probs.
* :class:`ImplicitPRM` (``prm/implicit``) is the judge: it re-scores a turn's text with the
  policy and the reference model. Score range: any real number (0 when the models agree).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from prm_gym.core.errors import ConfigError, JudgeError
from prm_gym.rewards.lm import messages_before, prompt_ids, scoring_model, target_logprobs
from prm_gym.rewards.protocol import Scope
from prm_gym.rewards.types import Turn, Verdict


def turn_rewards(
    policy_logps: Sequence[float], ref_logps: Sequence[float], turn_ids: Sequence[int], beta: float = 0.05
) -> list[float]:
    """Per-turn implicit process rewards.

    Args:
        policy_logps: log pi_theta of every token of the trajectory.
        ref_logps: log pi_ref of the same tokens.
        turn_ids: per token, the turn it was sampled in, or -1 for tokens the policy did not
            sample (prompt, tool results); turns are numbered 0..n-1.
        beta: the KL coefficient of the implicit reward.

    Returns:
        One reward per turn (``max(turn_ids) + 1`` values).
    """
    if not len(policy_logps) == len(ref_logps) == len(turn_ids):
        raise ValueError(
            f"lengths differ: {len(policy_logps)} policy, {len(ref_logps)} reference, {len(turn_ids)} turn ids."
        )
    n = max(turn_ids, default=-1) + 1
    out = [0.0] * n
    for lp, lr, t in zip(policy_logps, ref_logps, turn_ids, strict=True):
        if t >= 0:
            out[t] += beta * (float(lp) - float(lr))
    for i, v in enumerate(out):
        if not math.isfinite(v):
            raise ValueError(f"implicit reward of turn {i} is not finite ({v!r}).")
    return out


class ImplicitPRM:
    """The implicit PRM as a judge (``prm/implicit``, term ``process``, scope ``turn``).

    Args:
        policy: the policy pi_theta: an HFPolicy or an id (``"hf:tiny"``, ``"hf:<dir>"``).
        ref: the reference pi_ref: an HFPolicy or an id; it must share the policy's tokenizer.
        beta: the KL coefficient.
        policy_seed, ref_seed: seeds used when an id names a randomly initialised model.
    """

    name = "prm/implicit"
    term = "process"
    scope: Scope = "turn"

    def __init__(
        self, policy: Any = "hf:tiny", ref: Any = "hf:tiny", beta: float = 0.05, policy_seed: int = 0, ref_seed: int = 1
    ):
        if not (math.isfinite(beta) and beta > 0):
            raise ConfigError(f"beta must be a finite number > 0, got {beta!r}.")
        self.beta = beta
        self._policy_spec, self._ref_spec = policy, ref
        self._seeds = (policy_seed, ref_seed)
        self._models: tuple[Any, Any] | None = None

    def _load(self) -> tuple[Any, Any]:
        if self._models is None:
            self._models = (
                scoring_model(self._policy_spec, self._seeds[0]),
                scoring_model(self._ref_spec, self._seeds[1]),
            )
        return self._models

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        policy, ref = self._load()
        out = []
        for turn in turns:
            start = time.perf_counter()
            prefix = prompt_ids(policy.tokenizer, messages_before(turn))
            target = list(policy.tokenizer.encode(turn.action, add_special_tokens=False))
            if not target:
                out.append(Verdict(0.0, latency_s=time.perf_counter() - start, tokens=0))
                continue
            lp = target_logprobs(policy.model, prefix, target)
            lr = target_logprobs(ref.model, prefix, target)
            try:
                (value,) = turn_rewards(lp, lr, [0] * len(target), self.beta)
            except ValueError as exc:
                raise JudgeError(f"prm/implicit: {exc}") from exc
            out.append(Verdict(value, latency_s=time.perf_counter() - start, tokens=len(prefix) + len(target)))
        return out
