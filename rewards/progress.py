"""Progress scorers: how much a turn moved the policy toward the gold answer.

* :class:`InfoGainJudge` (``progress/info_gain``, in :mod:`prm_gym.rewards.info_gain`): IGPO's
  information gain, the change the turn causes in the policy's probability of the gold answer.
* :class:`MonteCarloProgressJudge` (``progress/mc``), in the style of PAV / SPA: the change in the
  success rate of ``samples`` short continuations (one sampled assistant turn each) started
  after the turn versus before it. On the turn that submits the answer, "after" is that answer's
  own correctness. Score range: [-1, 1].

Both need a policy (``policy="hf:tiny"``, ``"hf:<dir>"`` or an object); information gain needs
its ``model`` and ``tokenizer`` (an :class:`prm_gym.core.hf.HFPolicy`), Monte-Carlo progress only the
:class:`prm_gym.core.policy.Policy` protocol.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import parse_action
from prm_gym.core.policy import SamplingParams
from prm_gym.rewards.info_gain import InfoGainJudge
from prm_gym.rewards.lm import load_policy, messages_after, messages_before, prompt_ids
from prm_gym.rewards.protocol import Scope
from prm_gym.rewards.rule import gold_answers, math_equal, normalize_answer
from prm_gym.rewards.types import Turn, Verdict

__all__ = ["InfoGainJudge", "MonteCarloProgressJudge", "is_correct"]


def is_correct(answer: str | None, gold: Any, check: str = "math") -> bool:
    """True when ``answer`` matches a gold answer (``check``: ``"math"`` or ``"exact"``)."""
    if answer is None:
        return False
    golds = gold_answers(gold)
    if check == "math":
        return any(math_equal(g, answer) for g in golds)
    return any(normalize_answer(g) == normalize_answer(answer) for g in golds)


class MonteCarloProgressJudge:
    """PAV/SPA-style Monte-Carlo progress of a turn (term ``process``, scope ``turn``).

    Args:
        policy: any :class:`prm_gym.core.policy.Policy` or a policy id.
        samples: continuations sampled before and after the turn.
        max_new_tokens, temperature: sampling settings of the continuations.
        check: ``"math"`` (math equivalence) or ``"exact"`` (normalised exact match).
        seed: seed for an id naming a randomly initialised model.
    """

    name = "progress/mc"
    term = "process"
    scope: Scope = "turn"

    def __init__(
        self,
        policy: Any = "hf:tiny",
        samples: int = 4,
        max_new_tokens: int = 32,
        temperature: float = 1.0,
        check: str = "math",
        seed: int = 0,
    ):
        if samples < 1 or check not in ("math", "exact"):
            raise ConfigError("progress/mc: samples must be >= 1 and check 'math' or 'exact'.")
        self.samples, self.check = samples, check
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)
        self._spec, self._seed = policy, seed
        self._policy: Any = None

    @property
    def policy(self) -> Any:
        if self._policy is None:
            self._policy = load_policy(self._spec, self._seed)
        return self._policy

    def success_rate(self, messages: list[dict[str, str]], gold: Any) -> tuple[float, int]:
        """Fraction of sampled continuations that submit a correct answer, and tokens sampled."""
        ids = prompt_ids(self.policy.tokenizer, messages)
        gens = self.policy.generate([ids] * self.samples, self.params)
        wins = sum(is_correct(parse_action(g.text).answer, gold, self.check) for g in gens)
        return wins / self.samples, sum(len(g.token_ids) for g in gens)

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        out = []
        for turn in turns:
            start = time.perf_counter()
            before, used = self.success_rate(messages_before(turn), turn.task.answer)
            if turn.final:
                after = float(is_correct(turn.answer, turn.task.answer, self.check))
            else:
                after, more = self.success_rate(messages_after(turn), turn.task.answer)
                used += more
            detail = f"{before:.2f}->{after:.2f}"
            out.append(Verdict(after - before, latency_s=time.perf_counter() - start, tokens=used, detail=detail))
        return out
