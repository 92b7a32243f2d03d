"""Judge expressions and how judges' scores become reward terms.

A judge expression is a weighted sum of judge ids, written as a string so it round-trips
through Gymnasium's JSON-able env kwargs::

    "rule/math_equiv"                      # one judge, weight 1
    "rule/f1 + 0.3*llm/turn"               # weights multiply with '*'
    "rule/exact_match - 0.1*rule/format"   # '+' and '-' need spaces around them

Ids may contain '-', '.', ':' and '@' (``prm/Qwen2.5-Math-PRM-7B``); an operator is a '+' or
'-' with whitespace on both sides. :func:`parse_judge_spec` gives a :class:`JudgeSpec`, whose
``str()`` is the canonical expression again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from envs.errors import ConfigError

_TERM_RE = re.compile(
    r"^(?:(?P<w>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\*\s*)?(?P<id>[A-Za-z0-9_.-]+/[A-Za-z0-9_.:@/-]+)$"
)


@dataclass(frozen=True)
class JudgeSpec:
    """A parsed judge expression: ``(weight, judge_id)`` pairs, in order."""

    items: tuple[tuple[float, str], ...]

    def __str__(self) -> str:
        parts = []
        for i, (w, jid) in enumerate(self.items):
            sign = "-" if w < 0 else "+"
            mag = abs(w)
            term = jid if mag == 1.0 else f"{mag:g}*{jid}"
            parts.append(term if i == 0 and sign == "+" else f"{sign} {term}" if i else f"-{term}")
        return " ".join(parts)

    @property
    def ids(self) -> list[str]:
        return [jid for _, jid in self.items]


def parse_judge_spec(expr: str | JudgeSpec) -> JudgeSpec:
    """Parse a judge expression.

    Raises:
        ConfigError: the expression is empty, malformed, or names a judge twice.
    """
    if isinstance(expr, JudgeSpec):
        return expr
    if not isinstance(expr, str) or not expr.strip():
        raise ConfigError("judge expression is empty; give e.g. 'rule/exact_match + 0.1*rule/format'.")
    tokens = re.split(r"\s+([+-])\s+", expr.strip())
    first = tokens[0]
    sign = 1.0
    if first.startswith("-"):
        sign, first = -1.0, first[1:].strip()
    items: list[tuple[float, str]] = []
    pieces = [(sign, first)] + [
        (1.0 if tokens[i] == "+" else -1.0, tokens[i + 1]) for i in range(1, len(tokens) - 1, 2)
    ]
    for s, piece in pieces:
        m = _TERM_RE.match(piece.strip())
        if not m:
            raise ConfigError(
                f"judge expression {expr!r}: cannot read {piece!r}; write terms as "
                "'<weight>*<family>/<name>' joined by ' + ' or ' - ' (spaces around operators)."
            )
        weight = s * float(m.group("w") or 1.0)
        if not math.isfinite(weight):
            raise ConfigError(f"judge expression {expr!r}: weight of {m.group('id')} is not finite.")
        items.append((weight, m.group("id")))
    ids = [i for _, i in items]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"judge expression {expr!r} names a judge twice; merge the weights.")
    return JudgeSpec(tuple(items))


def weighted_sum(terms: Mapping[str, float]) -> float:
    """The reward of one turn: the sum of its (already weighted) terms.

    Raises:
        ValueError: a term is not finite.
    """
    total = 0.0
    for name, value in terms.items():
        if not math.isfinite(value):
            raise ValueError(f"reward term {name!r} is not finite ({value!r}).")
        total += value
    return total
