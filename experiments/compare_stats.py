"""The statistics of ``make compare`` and ``make learn`` (no torch): mean ± standard error across
seeds, success rates and paired per-task differences, held-out success at matched generated tokens,
and the plots.

A run is read from its ``metrics.jsonl`` rows (:func:`prm_gym.training.metrics.read_metrics`).
Its *curve* is the held-out success at each evaluation against the generated tokens spent up to
that step; comparing two methods "at equal tokens" reads each seed's curve at the same token
counts by linear interpolation (never past the tokens a run actually spent), then averages seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prm_gym.training.metrics import save_figure


def mean_se(values: Sequence[float]) -> dict[str, Any]:
    """``{"mean", "se", "n"}``: the mean and its standard error (sample std / sqrt(n); 0 for n = 1)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_se needs at least one value")
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return {"mean": mean, "se": math.sqrt(var / n), "n": n}


def rate(records: Sequence[Mapping[str, Any]], key: str) -> tuple[float, float]:
    """The share of ``records`` whose ``key`` is true, and its binomial standard error."""
    if not records:
        raise ValueError("rate needs at least one record")
    p = sum(bool(r[key]) for r in records) / len(records)
    return p, math.sqrt(p * (1 - p) / len(records))


def paired(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], key: str = "strict") -> dict[str, Any]:
    """``b`` minus ``a`` paired per task: discordant counts and the difference with its standard error
    (the s.e. of a mean of per-task differences in {-1, 0, 1}).

    Raises:
        ValueError: when ``a`` and ``b`` do not hold the same task ids (the pairing would be wrong).
    """
    by = {r["task_id"]: r[key] for r in a}
    ids_b = [r["task_id"] for r in b]
    if not b or len(by) != len(a) or len(set(ids_b)) != len(ids_b) or set(ids_b) != set(by):
        raise ValueError(
            f"paired needs the same distinct task ids on both sides ({len(a)} and {len(b)} records, "
            f"{len(set(ids_b) ^ set(by))} ids on one side only)"
        )
    diffs = [int(r[key]) - int(by[r["task_id"]]) for r in b]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / max(n - 1, 1)
    se = math.sqrt(var / n)
    return {
        "diff": mean,
        "se": se,
        "z": mean / se if se else 0.0,
        "b_only": diffs.count(1),
        "a_only": diffs.count(-1),
        "n": n,
    }


def curve(rows: Sequence[Mapping[str, Any]], key: str = "eval/success") -> list[tuple[int, float, float]]:
    """``(step, cumulative generated tokens, value)`` at every row holding ``key``, in step order.

    The tokens at step ``s`` are the sum of ``generated_tokens`` over steps ``1..s`` (the evaluation
    logged at step ``s`` saw the policy after those tokens were trained on).
    """
    spent: dict[int, float] = {0: 0.0}
    total = 0.0
    for row in sorted((r for r in rows if "generated_tokens" in r), key=lambda r: int(r["step"])):
        total += float(row["generated_tokens"])
        spent[int(row["step"])] = total
    points: dict[int, float] = {}
    for row in rows:
        if key in row:
            points[int(row["step"])] = float(row[key])  # the last evaluation of a step wins
    out = []
    for step in sorted(points):
        known = [s for s in spent if s <= step]
        out.append((step, spent[max(known)], points[step]))
    return out


def value_at(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """``ys`` linearly interpolated at ``x`` (``xs`` increasing; ``x`` inside their range)."""
    if not xs or len(xs) != len(ys):
        raise ValueError("value_at needs matching, non-empty xs and ys")
    if x < xs[0] - 1e-9 or x > xs[-1] + 1e-9:
        raise ValueError(f"x={x} is outside the curve's range [{xs[0]}, {xs[-1]}]: no extrapolation")
    for i in range(1, len(xs)):
        if x <= xs[i]:
            lo, hi = xs[i - 1], xs[i]
            w = 0.0 if hi == lo else (x - lo) / (hi - lo)
            return ys[i - 1] + w * (ys[i] - ys[i - 1])
    return ys[-1]


def at_tokens(curves: Mapping[str, Sequence[Sequence[tuple[int, float, float]]]], points: int = 5) -> dict[str, Any]:
    """Held-out success of each arm at matched generated tokens.

    Args:
        curves: arm name -> one :func:`curve` per seed.
        points: token counts on the grid, evenly spaced from 0 to the budget.

    Returns:
        ``{"budget", "tokens": grid, arm: [mean_se at each grid point]}``, where the budget is the
        fewest tokens any run of any arm spent: every arm is read inside its own measured range.
    """
    budget = min(c[-1][1] for runs in curves.values() for c in runs)
    grid = [budget * i / (points - 1) for i in range(points)] if points > 1 else [budget]
    out: dict[str, Any] = {"budget": budget, "tokens": grid}
    for arm, runs in curves.items():
        out[arm] = [mean_se([value_at([p[1] for p in c], [p[2] for p in c], t) for c in runs]) for t in grid]
    return out


def final(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    """The last logged value of ``key``."""
    values = [float(r[key]) for r in rows if key in r]
    if not values:
        raise ValueError(f"no row holds {key!r}")
    return values[-1]


def train_seconds(rows: Sequence[Mapping[str, Any]]) -> float:
    """Seconds the training steps took, evaluations excluded: the sum of ``rollout_s + learn_s``."""
    return sum(float(r.get("rollout_s", 0.0)) + float(r.get("learn_s", 0.0)) for r in rows)


def plot_curves(
    series: Mapping[str, Sequence[tuple[float, dict[str, Any]]]], xlabel: str, ylabel: str, title: str, path: Path
) -> Path:
    """One line per arm (mean) with a ± 1 s.e. band; ``series``: arm -> [(x, mean_se)]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for arm, pts in series.items():
        xs = [x for x, _ in pts]
        m = [s["mean"] for _, s in pts]
        se = [s["se"] for _, s in pts]
        ax.plot(xs, m, marker="o", ms=3, label=arm)
        ax.fill_between(
            xs, [a - b for a, b in zip(m, se, strict=True)], [a + b for a, b in zip(m, se, strict=True)], alpha=0.2
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def by_step(runs: Sequence[Sequence[tuple[int, float, float]]]) -> list[tuple[float, dict[str, Any]]]:
    """Mean ± s.e. across seeds at each evaluated step the seeds share."""
    steps = sorted(set.intersection(*(set(p[0] for p in c) for c in runs)))
    table = [{p[0]: p[2] for p in c} for c in runs]
    return [(float(s), mean_se([t[s] for t in table])) for s in steps]


def plot_bars(values: Mapping[str, dict[str, Any]], ylabel: str, title: str, path: Path) -> Path:
    """One bar per arm (mean) with a ± 1 s.e. error bar; ``values``: arm -> mean_se."""
    import matplotlib

    matplotlib.use("Agg")
    import textwrap

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    arms = list(values)
    ax.bar(range(len(arms)), [values[a]["mean"] for a in arms], yerr=[values[a]["se"] for a in arms], capsize=4)
    ax.set_xticks(range(len(arms)), [textwrap.fill(a, 24) for a in arms], fontsize=8)  # long labels wrap
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)
