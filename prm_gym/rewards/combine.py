"""Judge expressions and how judges' scores become reward terms.

A judge expression is a weighted sum of judge ids, written as a string so it round-trips
through Gymnasium's JSON-able env kwargs::

    "rule/math_equiv"                      # one judge, weight 1
    "rule/f1 + 0.3*llm/turn"               # weights multiply with '*'
    "rule/exact_match - 0.1*rule/format"   # '+' and '-' need spaces around them

Ids may contain '-', '.', ':' and '@' (``prm/Qwen2.5-Math-PRM-7B``); an operator is a '+' or
'-' with whitespace on both sides. Options after a ';' select how a trajectory's process and
outcome rewards are combined (:class:`CombineConfig`)::

    "rule/f1 + 0.3*llm/turn ; credit=min, gate=0.5, norm=zscore, clip=5"

:func:`parse_judge_spec` gives a :class:`JudgeSpec`, whose ``str()`` is the canonical expression
again. The pure functions below implement the combinations: PURE's min-form credit assignment
(:func:`min_form_values`), G-RA's gated accumulation (:func:`gated`), PPR's ReNorm (:func:`renorm`),
group normalisation (:func:`normalize`: z-score, min-max), clipping and finiteness checks, and
:func:`combine_group` for a group.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from prm_gym.core.errors import ConfigError

_TERM_RE = re.compile(
    r"^(?:(?P<w>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\*\s*)?(?P<id>[A-Za-z0-9_.-]+/[A-Za-z0-9_.:@/-]+)$"
)


@dataclass(frozen=True)
class JudgeSpec:
    """A parsed judge expression: ``(weight, judge_id)`` pairs, in order."""

    items: tuple[tuple[float, str], ...]
    options: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        text = self._terms()
        if self.options:
            text += " ; " + ", ".join(f"{k}={v}" for k, v in self.options)
        return text

    def combine_config(self) -> CombineConfig:
        """The :class:`CombineConfig` the expression's options (after ``;``) select."""
        return CombineConfig.from_options(dict(self.options))

    def _terms(self) -> str:
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
    terms_text, _, options_text = expr.partition(";")
    options = _parse_options(expr, options_text) if _ else ()
    if not terms_text.strip():
        raise ConfigError(f"judge expression {expr!r} has options but no judges before ';'.")
    tokens = re.split(r"\s+([+-])\s+", terms_text.strip())
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
    return JudgeSpec(tuple(items), options)


def weighted_sum(terms: Mapping[str, float]) -> float:
    """The reward of one turn: the sum of its (already weighted) terms.

    Raises:
        ValueError: a term is not finite.
    """
    total = sum(terms.values(), 0.0)
    if not math.isfinite(total):  # a non-finite term makes the sum non-finite: find it for the message
        bad = ", ".join(f"{name!r} ({value!r})" for name, value in terms.items() if not math.isfinite(value))
        raise ValueError(f"reward term {bad} is not finite." if bad else f"reward sum {total!r} is not finite.")
    return total


# ---------------------------------------------------------------------------- combination options
_OPTION_RE = re.compile(r"^\s*(?P<k>[a-z_]+)\s*=\s*(?P<v>[A-Za-z0-9_.+-]+)\s*$")


def _parse_options(expr: str, text: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for piece in text.split(","):
        m = _OPTION_RE.match(piece)
        if not m:
            raise ConfigError(
                f"judge expression {expr!r}: cannot read option {piece.strip()!r}; write options after ';' "
                "as 'key=value' joined by ',' (e.g. 'rule/f1 + 0.3*llm/turn ; credit=min, gate=0.5')."
            )
        out.append((m.group("k"), m.group("v")))
    CombineConfig.from_options(dict(out))  # validate now, with a clear message
    return tuple(out)


#: The values of the ``norm`` option.
NORMS: tuple[str, ...] = ("none", "renorm", "zscore", "minmax")


@dataclass(frozen=True)
class CombineConfig:
    """How a trajectory's per-turn process rewards and its outcome reward are mixed, per group.

    Trainer configuration (``train-agent --shaping.credit min --shaping.gate 0.5``); the older form,
    options after ``;`` in a judge expression (``"rule/f1 + 0.3*llm/turn ; credit=min, gate=0.5"``),
    still parses (:meth:`JudgeSpec.combine_config`) and the trainer reads it with a DeprecationWarning.
    """

    credit: Literal["sum", "min"] = "sum"
    """sum: each turn keeps its process reward; min: PURE's min-form credit assignment (a turn's
    value is the minimum of its own and all future process rewards)."""
    gate: float | None = None
    """G-RA gated accumulation: process rewards count only when the outcome reaches this value
    (None: no gate)."""
    norm: Literal["none", "renorm", "zscore", "minmax"] = "none"
    """renorm: PPR's ReNorm (every turn but the last gets process + outcome - renorm_beta, the
    answering turn the outcome); zscore or minmax: process and outcome rewards each normalised over
    the group before they are mixed; none."""
    clip: float | None = None
    """Clip every mixed reward to [-clip, clip] (None: no clipping)."""
    renorm_beta: float = 1.0
    """ReNorm's shift (the authors' renorm_beta, 1.0 in their runs); only with norm=renorm."""

    def __post_init__(self) -> None:
        if self.credit not in ("sum", "min"):
            raise ConfigError(f"credit must be 'sum' or 'min', got {self.credit!r}.")
        if self.norm not in NORMS:
            raise ConfigError(f"norm must be one of {', '.join(NORMS)}, got {self.norm!r}.")
        if self.gate is not None and not math.isfinite(self.gate):
            raise ConfigError(f"gate must be a finite number, got {self.gate!r}.")
        if self.clip is not None and not (math.isfinite(self.clip) and self.clip > 0):
            raise ConfigError(f"clip must be a finite number > 0, got {self.clip!r}.")
        if not math.isfinite(self.renorm_beta):
            raise ConfigError(f"renorm_beta must be a finite number, got {self.renorm_beta!r}.")
        if self.renorm_beta != 1.0 and self.norm != "renorm":
            raise ConfigError(f"renorm_beta={self.renorm_beta:g} only applies with norm=renorm; add 'norm=renorm'.")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> CombineConfig:
        """Build from ``key=value`` strings; unknown keys raise :class:`ConfigError`."""
        unknown = set(options) - {"credit", "gate", "norm", "clip", "renorm_beta"}
        if unknown:
            raise ConfigError(
                f"unknown combination option(s) {sorted(unknown)}; use credit, gate, norm, clip, renorm_beta."
            )
        try:
            gate = float(options["gate"]) if "gate" in options else None
            clip = float(options["clip"]) if "clip" in options else None
            beta = float(options.get("renorm_beta", 1.0))
        except ValueError as exc:
            raise ConfigError(f"gate, clip and renorm_beta must be numbers: {exc}") from exc
        credit, norm = options.get("credit", "sum"), options.get("norm", "none")  # checked by __post_init__
        return cls(cast(Any, credit), gate, cast(Any, norm), clip, beta)


# ---------------------------------------------------------------------------- pure combination maths
def check_finite(values: Sequence[float], what: str = "reward") -> list[float]:
    """``values`` as floats; raises ValueError naming the first non-finite one."""
    out = [float(v) for v in values]
    for i, v in enumerate(out):
        if not math.isfinite(v):
            raise ValueError(f"{what}[{i}] is not finite ({v!r}).")
    return out


def clip(values: Sequence[float], low: float, high: float) -> list[float]:
    """Each value clipped to ``[low, high]`` (non-finite values raise ValueError)."""
    if low > high:
        raise ConfigError(f"clip bounds are reversed: low={low} > high={high}.")
    return [min(high, max(low, v)) for v in check_finite(values)]


def min_form_values(process: Sequence[float]) -> list[float]:
    """PURE's min-form value of each turn: the minimum of its own and all future process rewards."""
    out: list[float] = []
    running = math.inf
    for r in reversed(check_finite(process, "process")):
        running = min(running, r)
        out.append(running)
    return out[::-1]


def min_form_rewards(process: Sequence[float]) -> list[float]:
    """Per-turn rewards whose return-to-go from turn t equals :func:`min_form_values` at t."""
    values = min_form_values(process)
    return [v - (values[i + 1] if i + 1 < len(values) else 0.0) for i, v in enumerate(values)]


def gated(process: Sequence[float], outcome: float, gate: float) -> list[float]:
    """G-RA gated accumulation: the process rewards when ``outcome >= gate``, else zeros."""
    rewards = check_finite(process, "process")
    if not math.isfinite(outcome):
        raise ValueError(f"outcome is not finite ({outcome!r}).")
    return rewards if outcome >= gate else [0.0] * len(rewards)


def renorm(process: Sequence[float], outcome: float, beta: float = 1.0) -> list[float]:
    """PPR's ReNorm: the per-turn rewards of one trajectory.

    Xu et al. 2025, *Hybrid Reward Normalization for Process-supervised Non-verifiable Agentic
    Tasks* (arXiv 2509.25598), method section, "Reward Normalization (ReNorm)". No equation number
    is cited: the stored copies of the paper we could read stop at the abstract. The definition
    below is the authors' release instead (github.com/Zhuohao-Li/ppr: its notes give ReNorm as
    ``r_hat = r_p + r_o - mu``, ``mu ~ 1``; ``verl/trainer/main_ppo.py``,
    ``RewardManager._apply_process_reward_optimizations``, applies it with
    ``process_reward_config.renorm_beta=1.0`` from ``examples/train_3b.sh``):

    * every turn ``t < T`` (a step the process reward model judges) gets
      ``r_t = r_t^process + r^outcome - beta``;
    * the last turn ``T`` (the answer, which the paper leaves to the outcome verifier) gets the
      outcome alone, ``r_T = r^outcome``; the process reward given for it is not used.

    With process rewards and the outcome in [0, 1] and ``beta = 1``, the steps of a right
    trajectory (outcome 1) keep their process reward, in [0, 1], and the steps of a wrong one
    (outcome 0) are shifted into [-1, 0]: no step of a failed trajectory earns more than a step
    of a successful one.

    Args:
        process: the trajectory's per-turn process rewards, each in [0, 1] (the authors' PPRM
            score is ``score / max_score``).
        outcome: its outcome reward, in [0, 1].
        beta: the shift (the authors' ``renorm_beta``, 1.0).

    Raises:
        ValueError: a value used is outside [0, 1] (ReNorm is defined for rewards on that scale;
            give the process judge a weight <= 1 and an outcome judge scored in [0, 1]).
    """
    rewards = check_finite(process, "process")
    steps = rewards[:-1]
    for i, r in enumerate([*steps, float(outcome)]):
        if not 0.0 <= r <= 1.0:
            what = f"process[{i}]" if i < len(steps) else "outcome"
            raise ValueError(f"norm=renorm needs rewards in [0, 1]; {what} is {r!r}. Use norm=zscore for others.")
    if not rewards:
        return []
    return [r + float(outcome) - beta for r in steps] + [float(outcome)]


def normalize(values: Sequence[float], method: str = "zscore", eps: float = 1e-6) -> list[float]:
    """``values`` normalised over the group: ``"zscore"``, ``"minmax"`` (to [0, 1]) or ``"none"``.

    A constant group normalises to zeros (z-score) or stays put (min-max gives zeros too).
    ``"renorm"`` leaves values (outcomes) as they are: PPR's ReNorm pays the outcome on the
    answering turn and mixes it into every earlier one (:func:`renorm`) instead of rescaling it.
    """
    xs = check_finite(values)
    if method in ("none", "renorm") or not xs:
        return xs
    if method == "minmax":
        lo, hi = min(xs), max(xs)
        return [0.0 if hi - lo < eps else (x - lo) / (hi - lo) for x in xs]
    if method == "zscore":
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
        return [0.0 if std < eps else (x - mean) / std for x in xs]
    raise ConfigError(f"unknown normalisation {method!r}; use 'zscore', 'minmax' or 'none'.")


def combine_group(
    process: Sequence[Sequence[float]], outcomes: Sequence[float], config: CombineConfig | None = None
) -> list[list[float]]:
    """Per-turn rewards of a group of trajectories, mixed as ``config`` says.

    Args:
        process: per trajectory, its turns' (already weighted) process rewards.
        outcomes: per trajectory, its outcome reward (paid on its last turn).
        config: credit assignment, gate, normalisation and clipping.

    Returns:
        Per trajectory, one finite reward per turn.
    """
    cfg = config or CombineConfig()
    if len(process) != len(outcomes):
        raise ValueError(f"{len(process)} process sequences but {len(outcomes)} outcomes.")
    outcome_raw = check_finite(outcomes, "outcome")
    if cfg.norm == "renorm":  # PPR: steps get process + outcome - beta, the answering turn the outcome
        steps = [renorm(traj, o, cfg.renorm_beta)[:-1] for traj, o in zip(process, outcome_raw, strict=True)]
        return _finish(steps, outcome_raw, outcome_raw, cfg, answer_turn=[bool(t) for t in process])
    if cfg.norm != "none":  # generic: process rewards normalised over all turns of the group
        flat = normalize([r for traj in process for r in traj], cfg.norm)
        sizes, process, start = [len(t) for t in process], [], 0
        for n in sizes:
            process.append(flat[start : start + n])
            start += n
    return _finish(process, outcome_raw, normalize(outcome_raw, cfg.norm), cfg)


def _finish(
    process: Sequence[Sequence[float]],
    outcome_raw: list[float],
    outcome_mixed: list[float],
    cfg: CombineConfig,
    answer_turn: Sequence[bool] | None = None,
) -> list[list[float]]:
    """Gate, credit assignment, the mixed outcome added to the last turn, clipping.

    ``answer_turn[i]`` True: trajectory ``i``'s rewards are its steps only, and the mixed outcome
    is appended as one more turn (ReNorm's answering turn) instead of added to the last.
    """
    out: list[list[float]] = []
    appended = answer_turn if answer_turn is not None else [False] * len(outcome_raw)
    for traj, raw, mixed, append in zip(process, outcome_raw, outcome_mixed, appended, strict=True):
        rewards = gated(traj, raw, cfg.gate) if cfg.gate is not None else check_finite(traj, "process")
        if cfg.credit == "min":
            rewards = min_form_rewards(rewards)
        if append:
            rewards.append(mixed)
        elif rewards:
            rewards[-1] += mixed
        out.append(clip(rewards, -cfg.clip, cfg.clip) if cfg.clip is not None else rewards)
    return out
