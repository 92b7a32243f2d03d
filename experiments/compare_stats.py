"""The statistics of ``make compare`` and ``make learn`` (no torch): mean ± standard error across
seeds, success rates and paired per-task differences, held-out success at matched generated tokens,
and the plots.

Held-out tasks are drawn from templates (phrasings), and the template is the unit of generalisation
(docs/learning.md): tasks of one template succeed or fail together, so a per-task standard
error understates the uncertainty. :func:`clustered_mean` gives the cluster-robust (CR1 sandwich)
standard error of a mean over G clusters, read with the t distribution on G - 1 degrees of freedom;
seeds combine by :func:`seeds_interval`, a t interval on n_seeds - 1. :func:`verdict` calls a
difference a gain only when its 95% interval excludes 0. The t distribution is computed here
(:func:`t_cdf`, :func:`t_quantile`; no scipy).

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


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (``df`` > 0, not necessarily whole)."""
    if df <= 0:
        raise ValueError(f"the t distribution needs df > 0, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t on ``df`` degrees of freedom (t_cdf inverted by bisection,
    to about 1e-12); ``t_quantile(0.975, 2)`` is 4.303."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile needs 0 < p < 1, got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def t_interval(mean: float, se: float, df: float, level: float = 0.95) -> dict[str, Any]:
    """``{"lo", "hi", "df", "t", "p"}``: ``mean ± t_{(1+level)/2, df} · se`` and the two-sided p of
    mean = 0. ``df`` < 1 (a single seed or cluster) gives the whole line: nothing is excluded."""
    if df < 1:
        return {"lo": -math.inf, "hi": math.inf, "df": df, "t": math.inf, "p": 1.0}
    t = t_quantile((1.0 + level) / 2.0, df)
    # two-sided p = I_{df/(df+t²)}(df/2, 1/2), without the cancellation of 1 - cdf
    p = _betainc(df / 2.0, 0.5, df / (df + (mean / se) ** 2)) if se > 0 else float(mean == 0)
    return {"lo": mean - t * se, "hi": mean + t * se, "df": df, "t": t, "p": p}


def verdict(lo: float, hi: float) -> str:
    """ "gain" only when the interval ``[lo, hi]`` lies above 0, "loss" below; else "no detectable difference"."""
    if lo > 0:
        return "gain"
    if hi < 0:
        return "loss"
    return "no detectable difference"


def clustered_mean(values: Sequence[float], clusters: Sequence[str], level: float = 0.95) -> dict[str, Any]:
    """The mean of ``values`` with its cluster-robust standard error (CR1): with G clusters and n
    values, ``se² = G/(G-1) · Σ_g (Σ_{i∈g} (x_i - mean))² / n²``, and its ``level`` t interval on
    G - 1 degrees of freedom. With one value per cluster this is the sample s.e. s/√n, which is the
    binomial s.e. √(p(1-p)/n) times √(G/(G-1)).

    Returns:
        ``{"mean", "se", "n", "clusters", "df", "lo", "hi", "p", "verdict"}``.

    Raises:
        ValueError: no values, lengths that differ, or fewer than two clusters (no spread to read).
    """
    n = len(values)
    if n == 0 or len(clusters) != n:
        raise ValueError(f"clustered_mean needs one cluster per value ({n} values, {len(clusters)} clusters)")
    mean = sum(values) / n
    sums: dict[str, float] = {}
    for x, g in zip(values, clusters, strict=True):
        sums[g] = sums.get(g, 0.0) + (x - mean)
    big_g = len(sums)
    if big_g < 2:
        raise ValueError(f"clustered_mean needs at least two clusters, got {big_g}")
    se = math.sqrt(big_g / (big_g - 1) * sum(v * v for v in sums.values()) / n**2)
    ci = t_interval(mean, se, big_g - 1, level)
    return {
        "mean": mean,
        "se": se,
        "n": n,
        "clusters": big_g,
        "df": big_g - 1,
        "lo": ci["lo"],
        "hi": ci["hi"],
        "p": ci["p"],
        "verdict": verdict(ci["lo"], ci["hi"]),
    }


def seeds_interval(values: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    """Seeds combined: :func:`mean_se` with its t interval on n - 1 degrees of freedom, the
    two-sided p and the :func:`verdict` (one seed: no interval, no gain)."""
    stats = mean_se(values)
    ci = t_interval(stats["mean"], stats["se"], stats["n"] - 1, level)
    return {
        **stats,
        "df": stats["n"] - 1,
        "lo": ci["lo"],
        "hi": ci["hi"],
        "p": ci["p"],
        "verdict": verdict(ci["lo"], ci["hi"]),
    }


def templates_of(records: Sequence[Mapping[str, Any]], field: str = "template") -> list[str] | None:
    """Each record's template (phrasing) id, or None when any record lacks one (no clustering then)."""
    if not records or any(field not in r for r in records):
        return None
    return [str(r[field]) for r in records]


def clustered_rate(records: Sequence[Mapping[str, Any]], key: str, field: str = "template") -> dict[str, Any] | None:
    """The share of ``records`` whose ``key`` is true, clustered by template (:func:`clustered_mean`);
    None when the records name no templates or only one."""
    groups = templates_of(records, field)
    if groups is None or len(set(groups)) < 2:
        return None
    return clustered_mean([float(bool(r[key])) for r in records], groups)


def rate(records: Sequence[Mapping[str, Any]], key: str) -> tuple[float, float]:
    """The share of ``records`` whose ``key`` is true, and its binomial standard error."""
    if not records:
        raise ValueError("rate needs at least one record")
    p = sum(bool(r[key]) for r in records) / len(records)
    return p, math.sqrt(p * (1 - p) / len(records))


def paired(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], key: str = "strict") -> dict[str, Any]:
    """``b`` minus ``a`` paired per task: discordant counts and the difference with its standard error
    (the s.e. of a mean of per-task differences in {-1, 0, 1}), and under ``"clustered"`` the same
    mean with its template-clustered s.e. and t interval (:func:`clustered_mean`; None when the
    records name no templates or only one).

    Raises:
        ValueError: when ``a`` and ``b`` do not hold the same task ids (the pairing would be wrong),
            or name different templates for one task.
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
    groups = templates_of(b) if templates_of(a) is not None else None
    if groups is not None:
        other = {r["task_id"]: str(r["template"]) for r in a}
        if any(other[r["task_id"]] != g for r, g in zip(b, groups, strict=True)):
            raise ValueError("paired: the two sides name different templates for the same task")
    return {
        "diff": mean,
        "se": se,
        "z": mean / se if se else 0.0,
        "b_only": diffs.count(1),
        "a_only": diffs.count(-1),
        "n": n,
        "clustered": clustered_mean(diffs, groups) if groups is not None and len(set(groups)) > 1 else None,
    }


def per_template(
    a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], key: str = "strict", field: str = "template"
) -> list[dict[str, Any]]:
    """Per template (sorted): ``{"template", "n", "a", "b", "diff"}``, the tasks, each arm's
    successes and ``b`` minus ``a`` in success rate. ``a`` and ``b`` must pair as in :func:`paired`."""
    paired(a, b, key)  # the same checks
    by = {r["task_id"]: bool(r[key]) for r in a}
    rows: dict[str, dict[str, Any]] = {}
    for r in b:
        row = rows.setdefault(str(r[field]), {"template": str(r[field]), "n": 0, "a": 0, "b": 0})
        row["n"] += 1
        row["a"] += int(by[r["task_id"]])
        row["b"] += int(bool(r[key]))
    for row in rows.values():
        row["diff"] = (row["b"] - row["a"]) / row["n"]
    return [rows[g] for g in sorted(rows)]


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
