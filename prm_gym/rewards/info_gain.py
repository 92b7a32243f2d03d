"""IGPO's information-gain turn reward (``progress/info_gain``).

Wang et al. 2025, *Information Gain-based Policy Optimization: A Simple and Effective Approach for
Multi-Turn LLM Agents* (arXiv 2510.14967), section 3. The policy's probability of the ground-truth
answer ``a = (a_1..a_L)`` after the first ``t`` turns of trajectory ``i`` is the length-normalised
(geometric-mean) token probability

    pi_theta(a | q, o_{i,<=t}) = exp( (1/L) * sum_j log pi_theta(a_j | q, o_{i,<=t}, a_{<j}) )

and the reward of turn ``t`` is its change, the information gain

    r_{i,t} = pi_theta(a | q, o_{i,<=t}) - pi_theta(a | q, o_{i,<=t-1}),   1 <= t < T,

a probability difference in [-1, 1] (not a difference of log-probs). The final turn ``T``, which
submits the answer, is rewarded by the outcome instead (the paper uses the answer's F1 against the
ground truth): ``r_{i,T} = F1(a_hat, a)``. Every turn handed to :meth:`InfoGainJudge.score` (a
whole group's) is teacher-forced in padded forward passes, one by default; probabilities of
contexts already seen (the "before" of turn t is the "after" of turn t-1) come from a cache.

How the authors run it (GuoqingWang1/IGPO; ``bff163b`` unless another commit is named), and the
options that select each rule (this module's defaults are the project's variant, kept as they were):

* **Belief = the gold span only** (``belief="span"``): the authors teacher-force
  ``"...<answer>\n{gold}\n</answer><|im_end|>"`` and average the log-probs of the gold tokens alone,
  slicing off the template before and after (``scrl/llm_agent/generation.py:295-305``, ``gt_idx``;
  used at lines 414-422). ``belief="template"`` (default) averages over the whole
  ``answer_template``, tags included.
* **Belief under the current policy** (``policy="current"``): the log-probs come from the actor
  being trained, at the weights that sample the group (``actor_rollout_wg.compute_log_prob``,
  ``generation.py:410-411``). The trainer's rollout worker binds ``"current"`` to its own policy
  object (:meth:`prm_gym.training.worker.RolloutWorker.make_env`); the cache is keyed by the
  policy's ``version``, so new weights are never answered from old probabilities. Default: a
  policy id, a frozen model loaded once.
* **The answer turn scores the outcome alone** (``final="outcome"``, the default): the last
  assistant turn carries the F1 and no gain (``verl/utils/reward_score/info_gain.py:204-205``).
* **No answer scores -2.0**: ``compute_f1`` returns -2.0 when the response has no ``<answer>`` (or
  its tags do not balance) (``verl/utils/reward_score/info_gain.py:75-99``). A truncated episode
  cannot be seen from one turn, so the trainer applies it: ``--loss.igpo-no-answer``
  (:func:`prm_gym.training.advantages.igpo_advantages`).
* **Rewards z-scored in the group before the discounted sum** (``--loss.igpo joint|separate``):
  ``compute_grpo_outcome_advantage`` of ``verl/trainer/ppo/core_algos.py`` at ``49a8c4e``
  (:func:`prm_gym.training.advantages.igpo_advantages`).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from prm_gym.core.errors import ConfigError, JudgeError
from prm_gym.rewards.lm import batched_target_logprobs, messages_after, messages_before, prompt_ids, scoring_model
from prm_gym.rewards.protocol import Scope
from prm_gym.rewards.rule import gold_answers, math_equal, normalize_answer, token_f1
from prm_gym.rewards.types import Turn, Verdict

_OUTCOMES = ("f1", "math", "exact")
_BELIEFS = ("template", "span")
CURRENT = "current"
"""The ``policy`` value that asks the trainer for the policy being trained (bound by its rollout worker)."""


def answer_probability(logprobs: Sequence[float]) -> float:
    """``exp(mean log-prob)``: IGPO's probability of the answer (its geometric-mean token prob)."""
    if not logprobs:
        raise ValueError("the answer has no tokens.")
    return math.exp(sum(logprobs) / len(logprobs))


def outcome_score(answer: str | None, gold: Any, outcome: str = "f1") -> float:
    """The final turn's reward: F1 (the paper's), math equivalence or exact match, best gold."""
    golds = gold_answers(gold)
    if answer is None or not golds:
        return 0.0
    if outcome == "f1":
        return max(token_f1(g, answer) for g in golds)
    if outcome == "math":
        return float(any(math_equal(g, answer) for g in golds))
    return float(any(normalize_answer(g) == normalize_answer(answer) for g in golds))


class InfoGainJudge:
    """IGPO information gain of a turn (term ``process``, scope ``turn``).

    Args:
        policy: an HFPolicy, a policy id (a frozen model, loaded once) or ``"current"`` (the policy
            being trained, at the weights that sample; bound by ``train-agent``'s rollout worker).
        answer_template: how the gold answer is written as the policy's next turn.
        final: ``"outcome"`` (the paper: the answering turn's reward is ``outcome``'s score, so do
            not add another outcome judge to the expression) or ``"gain"`` (the information gain
            on every turn; combine it with an outcome judge yourself).
        outcome: ``"f1"`` (the paper), ``"math"`` or ``"exact"``: how the final answer is scored.
        belief: ``"template"`` (this project's variant: the probability of the whole
            ``answer_template``, tags included) or ``"span"`` (the authors': the gold answer's tokens
            alone, the template around them teacher-forced as context).
        batch_size: sequences per forward pass (0: all the batch's turns in one pass).
        cache_size: answer probabilities kept per context (0: no cache).
        seed: seed for an id naming a randomly initialised model.
    """

    name = "progress/info_gain"
    term = "process"
    scope: Scope = "turn"
    group_batched = True  # rollout workers score a whole group's turns in one call (one forward pass)

    def __init__(
        self,
        policy: Any = "hf:tiny",
        answer_template: str = "<answer>{answer}</answer>",
        final: str = "outcome",
        outcome: str = "f1",
        belief: str = "template",
        batch_size: int = 0,
        cache_size: int = 4096,
        seed: int = 0,
    ):
        if "{answer}" not in answer_template:
            raise ConfigError("progress/info_gain: answer_template must contain '{answer}'.")
        if final not in ("outcome", "gain") or outcome not in _OUTCOMES:
            raise ConfigError("progress/info_gain: final must be 'outcome' or 'gain', outcome 'f1', 'math' or 'exact'.")
        if belief not in _BELIEFS:
            raise ConfigError(f"progress/info_gain: belief must be 'template' or 'span', not {belief!r}.")
        if belief == "span" and answer_template.strip() == "{answer}":
            raise ConfigError("progress/info_gain: belief='span' needs an answer_template with text around '{answer}'.")
        if batch_size < 0 or cache_size < 0:
            raise ConfigError("progress/info_gain: batch_size and cache_size must be >= 0.")
        self.answer_template, self.final, self.outcome, self.belief = answer_template, final, outcome, belief
        self.batch_size, self.cache_size = batch_size, cache_size
        self._spec, self._seed = policy, seed
        self._policy: Any = None
        self._cache: OrderedDict[tuple[Any, ...], float] = OrderedDict()
        self.forward_passes = 0

    @property
    def policy(self) -> Any:
        if self._policy is None:
            if self._spec == CURRENT:
                raise ConfigError(
                    "progress/info_gain: policy='current' is the policy being trained; train-agent's rollout "
                    "worker binds it. Outside train-agent pass the HFPolicy object itself."
                )
            self._policy = scoring_model(self._spec, self._seed)
        return self._policy

    def _target(self, tok: Any, gold: str) -> tuple[list[int], int]:
        """The ids to teacher-force after the context, and where the scored span starts.

        ``belief="template"``: the whole template, all scored. ``belief="span"``: the template up to
        the end of the gold answer; only the answer's ids are scored (the authors' ``gt_idx``: the
        lengths of the text before and after the answer, tokenised alone, are cut off).
        """
        ids = list(tok.encode(self.answer_template.format(answer=gold), add_special_tokens=False))
        if self.belief == "template":
            return ids, 0
        before, after = self.answer_template.split("{answer}", 1)
        start = len(tok.encode(before, add_special_tokens=False)) if before else 0
        end = len(ids) - (len(tok.encode(after, add_special_tokens=False)) if after else 0)
        if end <= start:
            raise JudgeError(f"{self.name}: the gold answer {gold!r} has no tokens of its own in the template.")
        return ids[:end], start

    def probabilities(self, contexts: Sequence[list[dict[str, str]]], golds: Sequence[str]) -> list[float]:
        """``pi_theta(gold | context)`` for each pair, new contexts in batched forward passes."""
        tok = self.policy.tokenizer
        version = getattr(self.policy, "version", None)  # "current": new weights, new probabilities
        rows, starts = [], []
        for messages, gold in zip(contexts, golds, strict=True):
            target, start = self._target(tok, gold)
            rows.append((prompt_ids(tok, messages), target))
            starts.append(start)
        keys = [(*p, -1, *t, -2, s, -3, version) for (p, t), s in zip(rows, starts, strict=True)]
        known: dict[tuple[Any, ...], float] = {}
        for k in keys:
            if k in self._cache:
                known[k] = self._cache[k]
                self._cache.move_to_end(k)
        missing = {k: i for i, k in enumerate(keys) if k not in known}
        if missing:
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            found = batched_target_logprobs(
                self.policy.model, [rows[i] for i in missing.values()], pad, self.batch_size
            )
            self.forward_passes += 1 if self.batch_size == 0 else -(-len(missing) // self.batch_size)
            for (k, i), lps in zip(missing.items(), found, strict=True):
                known[k] = answer_probability(lps[starts[i] :])
                self._remember(k, known[k])
        return [known[k] for k in keys]

    def _remember(self, key: tuple[Any, ...], prob: float) -> None:
        if self.cache_size == 0:
            return
        self._cache[key] = prob
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        start = time.perf_counter()
        out: list[Verdict | None] = [None] * len(turns)
        gain_idx = []
        for i, turn in enumerate(turns):
            if turn.final and self.final == "outcome":
                value = outcome_score(turn.answer, turn.task.answer, self.outcome)
                out[i] = Verdict(value, latency_s=0.0, detail=f"outcome {self.outcome}={value:.3f}")
            else:
                gain_idx.append(i)
        if gain_idx:
            golds = [self._gold(turns[i]) for i in gain_idx]
            contexts = [messages_before(turns[i]) for i in gain_idx] + [messages_after(turns[i]) for i in gain_idx]
            probs = self.probabilities(contexts, golds + golds)
            latency = time.perf_counter() - start
            for k, i in enumerate(gain_idx):
                before, after = probs[k], probs[k + len(gain_idx)]
                gain = after - before
                if not math.isfinite(gain):
                    raise JudgeError(f"{self.name}: non-finite information gain {gain!r}.")
                out[i] = Verdict(gain, latency_s=latency, detail=f"{before:.4f}->{after:.4f}")
        return [v for v in out if v is not None]

    def _gold(self, turn: Turn) -> str:
        golds = gold_answers(turn.task.answer)
        if not golds:
            raise JudgeError(f"{self.name}: task {turn.task.id!r} has no gold answer.")
        return golds[0]
