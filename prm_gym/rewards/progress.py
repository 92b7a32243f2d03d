"""Progress scorers: how much a turn moved the policy toward the gold answer.

* :class:`InfoGainJudge` (``progress/info_gain``, in :mod:`prm_gym.rewards.info_gain`): IGPO's
  information gain, the change the turn causes in the policy's probability of the gold answer.
* :class:`MonteCarloProgressJudge` (``progress/mc``): PAV / SPA progress estimated by Monte-Carlo
  rollouts that run several turns into the future.

Progress (Setlur et al. 2024, *Rewarding Progress: Scaling Automated Process Verifiers for LLM
Reasoning*, PAV, eq. for the process advantage ``A^mu(s_h, a_h) = Q^mu(s_h, a_h) - V^mu(s_h)``;
SPA-RL, Wang et al. 2025, likewise rewards each step by its contribution to the success
probability) is the change in the probability that the policy, continuing from a state, reaches
a correct answer. Here a state is the chat up to a turn; its value ``V(s)`` is estimated by
``samples`` rollouts of up to ``horizon`` turns each: the policy samples a turn, its tool calls
run (with ``tools``, the env's tool functions; without them the rollout is told the tool is not
available) and the rollout continues until it submits an answer or reaches the horizon. The
turn's score is ``V(after) - V(before)``; on the turn that submits the answer, ``V(after)`` is
that answer's own correctness. Values are cached by the state's token ids, so the "before" of a
turn (the "after" of the previous one) and prefixes shared across a group are rolled out once.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import parse_action
from prm_gym.core.policy import SamplingParams
from prm_gym.core.policy_spec import PolicySpec
from prm_gym.rewards.info_gain import InfoGainJudge
from prm_gym.rewards.lm import messages_after, messages_before, prompt_ids
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


@dataclass
class _Rollout:
    """One rollout in progress: its chat, and whether it ended and how."""

    state: int  # index of the state it estimates
    messages: list[dict[str, str]]
    done: bool = False
    won: bool = False
    turns: int = 0
    tokens: int = 0
    seen: list[str] = field(default_factory=list)


class MonteCarloProgressJudge:
    """PAV/SPA Monte-Carlo progress of a turn (term ``process``, scope ``turn``).

    Args:
        policy: any :class:`prm_gym.core.policy.Policy` or a policy id (the rollout policy).
        samples: rollouts per state.
        horizon: most turns a rollout runs (1: only the next turn, as before).
        budget: most sampled turns per state estimate (0: ``samples * horizon``). When the
            rollouts would pass it, the ones still running stop and count as not solved.
        tools: ``{name: callable}`` (or :class:`prm_gym.core.tools.Tool` objects) run for the
            rollouts' tool calls; without it a call is answered "not available in a rollout".
        max_new_tokens, temperature: sampling settings of each rollout turn.
        check: ``"math"`` (math equivalence) or ``"exact"`` (normalised exact match).
        cache_size: state values kept (0: no cache).
        seed: seed for an id naming a randomly initialised model.
    """

    name = "progress/mc"
    term = "process"
    scope: Scope = "turn"

    def __init__(
        self,
        policy: Any = "hf:tiny",
        samples: int = 4,
        horizon: int = 3,
        budget: int = 0,
        tools: Mapping[str, Any] | None = None,
        max_new_tokens: int = 32,
        temperature: float = 1.0,
        check: str = "math",
        cache_size: int = 4096,
        seed: int = 0,
    ):
        if samples < 1 or horizon < 1 or budget < 0 or cache_size < 0:
            raise ConfigError("progress/mc: samples and horizon must be >= 1, budget and cache_size >= 0.")
        if check not in ("math", "exact"):
            raise ConfigError(f"progress/mc: check must be 'math' or 'exact', got {check!r}.")
        self.samples, self.horizon, self.check, self.cache_size = samples, horizon, check, cache_size
        self.budget = budget or samples * horizon
        self.tools: dict[str, Callable[..., Any]] = {k: getattr(v, "fn", v) for k, v in (tools or {}).items()}
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)
        self._spec, self._seed = policy, seed
        self._policy: Any = None
        self._cache: OrderedDict[tuple[Any, ...], tuple[float, int]] = OrderedDict()
        self.sampled_turns = 0

    @property
    def policy(self) -> Any:
        if self._policy is None:
            spec = self._spec
            if spec is None:
                raise ConfigError("progress/mc: a policy is required: give policy='hf:tiny', 'hf:<dir>' or a Policy.")
            self._policy = PolicySpec.parse(spec).load(self._seed) if isinstance(spec, str) else spec
        return self._policy

    # ------------------------------------------------------------------ state values
    def values(self, states: Sequence[list[dict[str, str]]], gold: Sequence[Any]) -> list[tuple[float, int]]:
        """``(V(s), tokens sampled)`` per state; each distinct uncached state is rolled out once."""
        tok = self.policy.tokenizer
        keys = [(*prompt_ids(tok, m), -1, json.dumps(g, default=str)) for m, g in zip(states, gold, strict=True)]
        known = {k: self._cache[k] for k in keys if k in self._cache}
        for k in known:
            self._cache.move_to_end(k)
        missing = {k: i for i, k in enumerate(keys) if k not in known}
        if missing:
            found = self._roll_out([states[i] for i in missing.values()], [gold[i] for i in missing.values()])
            for k, value in zip(missing, found, strict=True):
                known[k] = value
                if self.cache_size:
                    self._cache[k] = value
                    while len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
        return [known[k] if k in missing else (known[k][0], 0) for k in keys]

    def _roll_out(self, states: list[list[dict[str, str]]], gold: list[Any]) -> list[tuple[float, int]]:
        """Run ``samples`` rollouts per state in lock-step, one batched generate per depth."""
        rollouts = [_Rollout(i, list(m)) for i, m in enumerate(states) for _ in range(self.samples)]
        used = [0] * len(states)
        for _ in range(self.horizon):
            live = []
            for r in rollouts:
                if r.done:
                    continue
                if used[r.state] >= self.budget:
                    r.done = True  # out of budget: not solved
                    continue
                used[r.state] += 1
                live.append(r)
            if not live:
                break
            ids = [prompt_ids(self.policy.tokenizer, r.messages) for r in live]
            gens = self.policy.generate(ids, self.params)
            self.sampled_turns += len(live)
            for r, g in zip(live, gens, strict=True):
                self._advance(r, g.text, len(g.token_ids), gold[r.state])
        out = []
        for i in range(len(states)):
            mine = [r for r in rollouts if r.state == i]
            out.append((sum(r.won for r in mine) / len(mine), sum(r.tokens for r in mine)))
        return out

    def _advance(self, r: _Rollout, text: str, n_tokens: int, gold: Any) -> None:
        """Apply one sampled turn to a rollout: an answer ends it; tool calls run; else a hint."""
        r.turns, r.tokens = r.turns + 1, r.tokens + n_tokens
        parsed = parse_action(text)
        r.messages.append({"role": "assistant", "content": text})
        if parsed.answer is not None and parsed.ok:
            r.done, r.won = True, is_correct(parsed.answer, gold, self.check)
        elif parsed.tool_calls and parsed.ok:
            outputs = [self._run_tool(c.name, c.arguments) for c in parsed.tool_calls]
            shown = "\n".join(f"<tool_response>\n{o}\n</tool_response>" for o in outputs)
            r.messages.append({"role": "user", "content": shown})
        else:
            r.messages.append({"role": "user", "content": parsed.describe_issues()})

    def _run_tool(self, name: str, arguments: dict[str, Any]) -> str:
        fn = self.tools.get(name)
        if fn is None:
            return f"Tool {name!r} is not available in a rollout."
        try:
            return str(fn(**arguments))
        except Exception as exc:  # the rollout's own bad call, shown to it as the env would
            return f"Error: {type(exc).__name__}: {exc}"

    # ------------------------------------------------------------------ scoring
    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        start = time.perf_counter()
        states: list[list[dict[str, str]]] = []
        for turn in turns:
            states += [messages_before(turn)] if turn.final else [messages_before(turn), messages_after(turn)]
        gold = [t.task.answer for t in turns for _ in range(1 if t.final else 2)]
        values = iter(self.values(states, gold))
        latency = time.perf_counter() - start
        out = []
        for turn in turns:
            before, used = next(values)
            if turn.final:
                after = float(is_correct(turn.answer, turn.task.answer, self.check))
            else:
                after, more = next(values)
                used += more
            out.append(Verdict(after - before, latency_s=latency, tokens=used, detail=f"{before:.2f}->{after:.2f}"))
        return out
