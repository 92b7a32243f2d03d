"""Tool-use reward terms: ToolRL's fine-grained call matching and OTC's tool efficiency.

=====================  ===============  ======  ===================================================
id                     term             scope   score
=====================  ===============  ======  ===================================================
``tool/format``        tool_format      turn    1.0 if the turn parsed cleanly, else 0.0
``tool/name``          tool_name        turn    fraction of the turn's calls whose tool name is a
                                                reference call's name, in [0, 1]
``tool/params``        tool_params      turn    mean Jaccard overlap of each call's parameter names
                                                with its reference call's, in [0, 1]
``tool/values``        tool_values      turn    mean fraction of each reference call's
                                                ``(name, value)`` pairs the call reproduces, in [0, 1]
``tool/efficiency``    tool_efficiency  final   correct * (n + 1) / (max(m, n) + 1): ``m`` calls
                                                made in the episode, ``n`` the reference count
=====================  ===============  ======  ===================================================

The format/name/parameter terms follow ToolRL (Qian et al. 2025, *ToolRL: Reward is All Tool
Learning Needs*, section 3.3), which splits a tool call's reward into format, tool-name, parameter
name and parameter value parts. The efficiency term follows OTC (Wang et al. 2025, *Acting Less is
Reasoning More: Teaching Model to Act Efficiently*): a correct answer reached with no more calls
than needed earns full reward, extra calls shrink it, and wrong answers earn nothing.

The reference comes from the task: ``task.meta["reference_calls"]`` (a list of
``{"name": ..., "arguments": {...}}``) or ``task.meta["reference_call"]`` (one). Without a
reference the name/params/values judges score 0.0 (nothing to compare with), and
``tool/efficiency`` uses ``task.meta["optimal_calls"]`` or its ``optimal_calls`` argument.
A turn without tool calls scores 0.0 on the call-matching terms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prm_gym.core.errors import JudgeError
from prm_gym.core.parsing import ToolCall, parse_action
from prm_gym.rewards.protocol import TurnJudge, score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn, Verdict


def reference_calls(meta: Mapping[str, Any]) -> list[ToolCall]:
    """The reference tool calls in a task's meta (empty when it has none).

    Raises:
        JudgeError: the meta holds a reference that is not ``{"name": str, "arguments": dict}``.
    """
    raw = meta.get("reference_calls", [meta["reference_call"]] if "reference_call" in meta else [])
    out = []
    for item in raw:
        if not (isinstance(item, Mapping) and isinstance(item.get("name"), str)):
            raise JudgeError(f"task reference call {item!r} must be a dict with a 'name' and 'arguments'.")
        args = item.get("arguments", {})
        if not isinstance(args, Mapping):
            raise JudgeError(f"task reference call {item!r}: 'arguments' must be a dict.")
        out.append(ToolCall(item["name"], dict(args)))
    return out


def values_equal(a: Any, b: Any) -> bool:
    """Parameter values compare as numbers when both are numeric, else as stripped strings."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a).strip() == str(b).strip()


def _best_reference(call: ToolCall, refs: Sequence[ToolCall]) -> ToolCall | None:
    same = [r for r in refs if r.name == call.name]
    if not same:
        return None
    return max(same, key=lambda r: (param_names_score(call, r), param_values_score(call, r)))


def param_names_score(call: ToolCall, ref: ToolCall) -> float:
    """Jaccard overlap of parameter names (1.0 when both take none)."""
    a, b = set(call.arguments), set(ref.arguments)
    return 1.0 if not a | b else len(a & b) / len(a | b)


def param_values_score(call: ToolCall, ref: ToolCall) -> float:
    """Fraction of the reference's ``(name, value)`` pairs that ``call`` reproduces (1.0 if none)."""
    if not ref.arguments:
        return 1.0
    hits = sum(k in call.arguments and values_equal(call.arguments[k], v) for k, v in ref.arguments.items())
    return hits / len(ref.arguments)


class _TurnToolJudge(TurnJudge):
    name = "tool/base"
    term = "tool"
    scope = "turn"

    def score_one(self, turn: Turn) -> Verdict:
        calls, refs = turn.parsed.tool_calls, reference_calls(turn.task.meta)
        if not calls or not refs:
            return Verdict(0.0, detail="no call" if not calls else "no reference")
        return Verdict(sum(self.call_score(c, refs) for c in calls) / len(calls))

    def call_score(self, call: ToolCall, refs: Sequence[ToolCall]) -> float:
        raise NotImplementedError


class ToolFormatJudge:
    """ToolRL's format term: 1.0 for a turn that parsed cleanly, 0.0 otherwise."""

    name = "tool/format"
    term = "tool_format"
    scope = "turn"

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        return [Verdict(1.0 if t.parsed.ok else 0.0) for t in turns]


class ToolNameJudge(_TurnToolJudge):
    """Fraction of the turn's calls that name a reference call's tool."""

    name = "tool/name"
    term = "tool_name"

    def call_score(self, call: ToolCall, refs: Sequence[ToolCall]) -> float:
        return float(any(r.name == call.name for r in refs))


class ToolParamsJudge(_TurnToolJudge):
    """Mean parameter-name Jaccard of each call against its best same-name reference (0 if none)."""

    name = "tool/params"
    term = "tool_params"

    def call_score(self, call: ToolCall, refs: Sequence[ToolCall]) -> float:
        ref = _best_reference(call, refs)
        return param_names_score(call, ref) if ref is not None else 0.0


class ToolValuesJudge(_TurnToolJudge):
    """Mean fraction of the best same-name reference's parameter values each call reproduces."""

    name = "tool/values"
    term = "tool_values"

    def call_score(self, call: ToolCall, refs: Sequence[ToolCall]) -> float:
        ref = _best_reference(call, refs)
        return param_values_score(call, ref) if ref is not None else 0.0


class ToolEfficiencyJudge:
    """OTC-style efficiency of a correct episode: ``correct * (n + 1) / (max(m, n) + 1)``.

    Args:
        verifier: the judge id that decides correctness on the final turn (score >= 1 counts).
        optimal_calls: ``n`` when the task has neither reference calls nor ``optimal_calls``.
        answer_tag: the env's answer tag, to re-parse earlier turns and count their calls.
    """

    name = "tool/efficiency"
    term = "tool_efficiency"
    scope = "final"
    needs_answer = True  # its verifier's gold answer

    def __init__(self, verifier: str = "rule/math_equiv", optimal_calls: int = 1, answer_tag: str = "answer"):
        if optimal_calls < 0:
            raise JudgeError(f"optimal_calls={optimal_calls} must be >= 0.")
        self.verifier = make_judge(verifier)
        self.optimal_calls = optimal_calls
        self.answer_tag = answer_tag

    def calls_made(self, turn: Turn) -> int:
        """Tool calls over the whole episode up to and including ``turn``."""
        fmt = turn.parsed.tool_format  # the episode's format: the history was written in it too
        earlier = sum(
            len(parse_action(a, answer_tag=self.answer_tag, tool_format=fmt).tool_calls) for a, _ in turn.history
        )
        return earlier + len(turn.parsed.tool_calls)

    def optimal(self, turn: Turn) -> int:
        refs = reference_calls(turn.task.meta)
        return len(refs) if refs else int(turn.task.meta.get("optimal_calls", self.optimal_calls))

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        correct = score_batch(self.verifier, turns)
        out = []
        for turn, verdict in zip(turns, correct, strict=True):
            m, n = self.calls_made(turn), self.optimal(turn)
            ok = 1.0 if verdict.score >= 1.0 else 0.0
            out.append(Verdict(ok * (n + 1) / (max(m, n) + 1), detail=f"calls={m} optimal={n} correct={ok:g}"))
        return out
