"""experiments/compare_stats.py: the t distribution, template-clustered standard errors, seeds'
t intervals and the gain verdict, on hand-computed examples and on make learn's committed records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from experiments.compare_stats import (
    clustered_mean,
    clustered_rate,
    mean_se,
    paired,
    per_template,
    rate,
    seeds_interval,
    t_cdf,
    t_interval,
    t_quantile,
    verdict,
)

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


@pytest.mark.parametrize(
    "df, q", [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (11, 2.201), (29, 2.045), (30, 2.042), (120, 1.980)]
)
def test_t_quantile_matches_the_table(df: int, q: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(q, abs=5e-4)
    assert t_quantile(0.025, df) == pytest.approx(-q, abs=5e-4)
    assert t_cdf(t_quantile(0.975, df), df) == pytest.approx(0.975, abs=1e-12)


def test_t_tends_to_the_normal_and_its_centre_is_zero() -> None:
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)
    assert t_quantile(0.5, 3) == pytest.approx(0.0, abs=1e-12) and t_cdf(0.0, 7) == pytest.approx(0.5)
    assert t_quantile(0.995, 5) == pytest.approx(4.032, abs=5e-4)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_t_matches_scipy_where_it_is_installed() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (0.5, 1, 2.5, 7, 60, 1000):
        for p in (0.6, 0.9, 0.975, 0.999):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9)


def test_clustered_se_by_hand_with_three_clusters() -> None:
    """Clusters a: [1, 1], b: [0], c: [1, 0, 0]; n = 6, mean 0.5; residual sums per cluster 1, -0.5,
    -0.5, squares 1.5; se² = 3/2 · 1.5 / 36 = 1/16, so se = 0.25 on t(2)."""
    out = clustered_mean([1, 1, 0, 1, 0, 0], ["a", "a", "b", "c", "c", "c"])
    assert out["mean"] == pytest.approx(0.5) and out["se"] == pytest.approx(0.25)
    assert (out["n"], out["clusters"], out["df"]) == (6, 3, 2)
    assert out["lo"] == pytest.approx(0.5 - 4.302653 * 0.25, abs=1e-6)
    assert out["hi"] == pytest.approx(0.5 + 4.302653 * 0.25, abs=1e-6)
    assert out["verdict"] == "no detectable difference"


def test_one_task_per_cluster_is_the_plain_se_times_the_small_sample_factor() -> None:
    wins = [1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 1, 1]
    records = [{"task_id": str(i), "template": f"t{i}", "strict": bool(w)} for i, w in enumerate(wins)]
    g = len(wins)
    _, binomial = rate(records, "strict")
    out = clustered_rate(records, "strict")
    assert out is not None
    assert out["se"] == pytest.approx(binomial * math.sqrt(g / (g - 1)))
    assert out["se"] == pytest.approx(mean_se([float(w) for w in wins])["se"])  # the sample s.e. s/√n


def test_clustering_needs_two_clusters_and_templates() -> None:
    with pytest.raises(ValueError, match="two clusters"):
        clustered_mean([1.0, 0.0], ["a", "a"])
    assert clustered_rate([{"strict": True}, {"strict": False}], "strict") is None


def test_verdict_says_gain_only_when_the_interval_excludes_zero() -> None:
    assert verdict(0.01, 0.2) == "gain" and verdict(-0.2, -0.01) == "loss"
    assert verdict(-0.01, 0.2) == verdict(0.0, 0.1) == "no detectable difference"
    # the figure: +4.0 ± 4.2 points over three seeds, t(2), p 0.44
    s = seeds_interval([-0.03, 0.115, 0.035])
    assert s["df"] == 2 and s["p"] == pytest.approx(0.44, abs=0.005) and s["verdict"] == "no detectable difference"
    assert s["hi"] - s["mean"] == pytest.approx(4.302653 * s["se"], rel=1e-6)
    assert seeds_interval([0.10, 0.11, 0.12])["verdict"] == "gain"
    assert seeds_interval([0.5])["verdict"] == "no detectable difference"  # one seed: no interval
    assert t_interval(0.0, 0.0, 3)["p"] == 1.0


def test_paired_clusters_by_template_and_refuses_mismatched_templates() -> None:
    a = [{"task_id": str(i), "template": "ab"[i % 2], "strict": False} for i in range(6)]
    b = [{**r, "strict": i % 2 == 0} for i, r in enumerate(a)]  # b wins every task of template a
    c = paired(a, b)
    assert c["diff"] == pytest.approx(0.5) and c["clustered"]["clusters"] == 2
    assert c["clustered"]["se"] > c["se"]
    rows = per_template(a, b)
    assert [(r["template"], r["n"], r["a"], r["b"], r["diff"]) for r in rows] == [
        ("a", 3, 0, 3, 1.0),
        ("b", 3, 0, 0, 0.0),
    ]
    with pytest.raises(ValueError, match="different templates"):
        paired(a, [{**r, "template": "z"} for r in b])
    assert paired([{k: v for k, v in r.items() if k != "template"} for r in a], b)["clustered"] is None


def test_committed_seed1_records_clustered_se_exceeds_the_per_task_se() -> None:
    """make learn at c992789, seed 1, GRPO minus SFT on the 12 held-out templates, greedy: +11.5
    points with per-task s.e. 2.7 but template-clustered s.e. 11.8, so its t(11) interval holds 0."""
    run = RESULTS / "learn-c992789-seed1"
    sft = json.loads((run / "sft-templates-greedy.json").read_text())
    grpo = json.loads((run / "grpo-templates-greedy.json").read_text())
    c = paired(sft, grpo)
    k = c["clustered"]
    assert c["diff"] == pytest.approx(0.115) and k["mean"] == pytest.approx(c["diff"])
    assert k["clusters"] == 12 and k["df"] == 11
    assert (
        k["se"] > c["se"] and k["se"] == pytest.approx(0.1177, abs=5e-4) and c["se"] == pytest.approx(0.0267, abs=5e-4)
    )
    assert k["lo"] < 0 < k["hi"] and k["verdict"] == "no detectable difference"
