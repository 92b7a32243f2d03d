"""``make compare``: its statistics (mean ± s.e., matched-token reading), the slow-tool workload, and
(slow) a shortened run of every comparison."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import prm_gym
from experiments import compare_stats as st
from prm_gym.core.errors import ConfigError
from prm_gym.envs.math.slow_tools import tool_delay


def test_mean_se_is_the_sample_std_over_root_n() -> None:
    out = st.mean_se([0.5, 0.7, 0.9])
    assert out["mean"] == pytest.approx(0.7)
    assert out["se"] == pytest.approx(0.2 / math.sqrt(3))  # sample std 0.2 (n - 1 in the variance)
    assert out["n"] == 3
    assert st.mean_se([0.4]) == {"mean": 0.4, "se": 0.0, "n": 1}
    with pytest.raises(ValueError):
        st.mean_se([])


def _rows(tokens_per_step: list[float], evals: dict[int, float]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"step": 0, "eval/success": evals[0]}]
    for step, tok in enumerate(tokens_per_step, 1):
        row: dict[str, Any] = {"step": step, "generated_tokens": tok}
        if step in evals and step < len(tokens_per_step):
            row["eval/success"] = evals[step]
        rows.append(row)
    rows.append({"step": len(tokens_per_step), "eval/success": evals[len(tokens_per_step)]})
    return rows


def test_curve_pairs_each_evaluation_with_the_tokens_spent_before_it() -> None:
    rows = _rows([100, 300, 200, 400], {0: 0.1, 2: 0.3, 4: 0.6})
    assert st.curve(rows) == [(0, 0.0, 0.1), (2, 400.0, 0.3), (4, 1000.0, 0.6)]


def test_matched_tokens_reads_every_arm_inside_its_own_range() -> None:
    """A cheap arm (tree) and an expensive one (chain): both are read at the cheap arm's budget,
    the expensive one by interpolation between its evaluations, never by extrapolation."""
    chain = [
        st.curve(_rows([500, 500], {0: 0.2, 1: 0.4, 2: 0.6})),
        st.curve(_rows([500, 500], {0: 0.2, 1: 0.2, 2: 0.4})),
    ]
    tree = [
        st.curve(_rows([250, 250], {0: 0.2, 1: 0.5, 2: 0.7})),
        st.curve(_rows([300, 300], {0: 0.2, 1: 0.3, 2: 0.5})),
    ]
    out = st.at_tokens({"chain": chain, "tree": tree}, points=3)
    assert out["budget"] == 500.0 and out["tokens"] == [0.0, 250.0, 500.0]
    # at 500 tokens: chain seeds read 0.4 and 0.2; tree seeds read 0.7 (its end) and 0.3 + (200/300) * 0.2
    assert out["chain"][2]["mean"] == pytest.approx(0.3)
    assert out["chain"][2]["se"] == pytest.approx(0.1)
    assert out["tree"][2]["mean"] == pytest.approx((0.7 + 0.3 + 0.2 * 200 / 300) / 2)
    # at 250: chain halfway to its first evaluation
    assert out["chain"][1]["mean"] == pytest.approx((0.3 + 0.2) / 2)
    with pytest.raises(ValueError, match="no extrapolation"):
        st.value_at([0.0, 100.0], [0.1, 0.2], 150.0)


def test_final_and_train_seconds_read_the_metrics() -> None:
    rows = [
        {"step": 0, "eval/success": 0.1},
        {"step": 1, "rollout_s": 2.0, "learn_s": 1.0},
        {"step": 2, "rollout_s": 3.0, "learn_s": 0.5, "eval/success": 0.3},
        {"step": 2, "eval/success": 0.4},
    ]
    assert st.final(rows, "eval/success") == 0.4
    assert st.train_seconds(rows) == pytest.approx(6.5)
    with pytest.raises(ValueError, match="eval/reward"):
        st.final(rows, "eval/reward")


def test_summary_table_and_plots(tmp_path: Path) -> None:
    from experiments.compare import summarize, table

    a = [_rows([100, 100], {0: 0.2, 1: 0.3, 2: 0.5}), _rows([100, 100], {0: 0.2, 1: 0.4, 2: 0.4})]
    b = [_rows([60, 60], {0: 0.2, 1: 0.3, 2: 0.3}), _rows([60, 60], {0: 0.2, 1: 0.2, 2: 0.3})]
    for rows in (*a, *b):
        for r in rows:
            if "eval/success" in r:
                r["eval/reward"] = r["eval/success"]
            if "generated_tokens" in r:
                r.update(rollout_s=1.0, learn_s=1.0)
    summary = summarize("tree", {"chain GRPO": a, "Tree-GRPO": b}, tmp_path, "cpu")
    assert summary["arms"]["chain GRPO"]["final_success"]["mean"] == pytest.approx(0.45)
    assert summary["arms"]["Tree-GRPO"]["generated_tokens"]["mean"] == 120
    assert summary["at_matched_tokens"]["budget"] == 120
    assert json.loads((tmp_path / "summary.json").read_text()) == summary and summary["device"] == "cpu"
    assert (tmp_path / "success.png").stat().st_size > 0 and (tmp_path / "tokens.png").stat().st_size > 0
    text = table(summary)
    assert "| chain GRPO | 20.0% ± 0.0% | 45.0% ± 5.0% | 25.0% ± 5.0% |  |" in text and "| 120 |" in text
    # Tree-GRPO ends at 30% on both seeds: 20 and 10 points under chain's 50% and 40%, paired by seed.
    assert summary["arms"]["Tree-GRPO"]["minus_first_success"]["mean"] == pytest.approx(-0.15)
    assert summary["arms"]["Tree-GRPO"]["minus_first_success"]["se"] == pytest.approx(0.05)
    assert "| Tree-GRPO | 20.0% ± 0.0% | 30.0% ± 0.0% | 10.0% ± 0.0% | -15.0% ± 5.0% |" in text


def test_tool_delay_is_seeded_heavy_tailed_and_capped() -> None:
    draws = [tool_delay(0, f"t{i}", 0, "{}", 0.3, 1.2, 10.0) for i in range(2000)]
    assert draws == [tool_delay(0, f"t{i}", 0, "{}", 0.3, 1.2, 10.0) for i in range(2000)]
    assert draws != [tool_delay(1, f"t{i}", 0, "{}", 0.3, 1.2, 10.0) for i in range(2000)]
    ordered = sorted(draws)
    median, p99 = ordered[1000], ordered[1980]
    assert 0.25 < median < 0.36 and p99 > 8 * median  # log-normal, sigma 1.2: p99 ~ 16x the median
    assert max(draws) <= 10.0 and sum(draws) / len(draws) > 1.6 * median  # mean well above the median
    assert tool_delay(0, "t", 0, "{}", 0.0, 1.2, 10.0) == 0.0


def test_slow_tools_env_sleeps_inside_the_tool_call_only() -> None:
    env = gym.make("prm/MathSlowTools-v0", levels=[1], latency_median_s=0.2, latency_sigma=0.0)
    obs, _ = env.reset(seed=0)
    t0 = time.perf_counter()
    _, _, _, _, info = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>')
    assert time.perf_counter() - t0 >= 0.2 and info["tool"]["latency_s"] >= 0.2 and info["tool"]["ok"]
    fast = gym.make("prm/MathSlowTools-v0", levels=[1], latency_median_s=0)
    fast.reset(seed=0)
    _, _, _, _, info = fast.step('<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>')
    assert info["tool"]["latency_s"] < 0.2
    with pytest.raises(ConfigError, match="latency_sigma"):
        gym.make("prm/MathSlowTools-v0", latency_sigma=-1)
    assert "prm/MathSlowTools-v0" not in prm_gym.ENVS  # a benchmark workload, not a built-in env


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_compare_all_shortened(tmp_path: Path) -> None:
    """Every comparison end to end, shortened (2 seeds, tiny warm start, 2 steps): the summaries,
    plots and shared runs that `make compare` writes."""
    from experiments.compare import main

    flags = ["--seeds", "2", "--output-dir", str(tmp_path), "--demos", "16", "--sft-steps", "2", "--steps", "2"]
    flags += ["--tasks-per-step", "1", "--eval-tasks", "4", "--eval-samples", "1", "--eval-every", "1"]
    out = main([*flags, "--which", "all", "--latency-median-s", "0.05"])
    assert set(out) == {"tree", "roots", "process", "async"}
    for which, summary in out.items():
        assert json.loads((tmp_path / which / "summary.json").read_text()) == summary
        assert (tmp_path / which / "success.png").exists()
        for arm in summary["arms"].values():
            assert arm["final_success"]["n"] == 2
    assert (tmp_path / "tree" / "tokens.png").exists() and (tmp_path / "async" / "wall.png").exists()
    tree = out["tree"]["arms"]
    assert tree["Tree-GRPO"]["generated_tokens"]["mean"] > 0
    # the chain GRPO run is the turn-level arm of `process`: trained once
    assert out["process"]["arms"]["turn-level process"] == tree["chain GRPO"]
    assert set(out["async"]["speedup_vs_sync"]) == {"sync", "async, staleness 1", "async, staleness 2"}
    assert out["roots"]["arms"]["Tree-GRPO"] == tree["Tree-GRPO"]  # the diagnostic reuses the tree run


def test_a_seed_count_under_one_is_refused_with_the_flag_named(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.compare import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--seeds", "0"])
    assert "--seeds must be at least 1 (got 0)" in capsys.readouterr().err


def test_the_roots_diagnostic_samples_one_chain_per_tree_root_and_changes_nothing_else() -> None:
    from dataclasses import replace

    from experiments.compare import arm_config, base_config, parse_args

    args = parse_args(["--trees", "3", "--expand-nodes", "2"])
    base = base_config(args, Path("/nonexistent/warm"), 0)
    roots = arm_config("grpo-roots", base, args)
    assert base.group_size == base.tree.leaves_per_task and roots.group_size == 3
    assert replace(roots, group_size=base.group_size) == base


def test_search_arms_each_change_one_thing_and_the_chain_matches_the_trees_tokens() -> None:
    from dataclasses import replace

    from experiments.compare import arm_config, base_config, parse_args
    from experiments.compare_search import chain_group_for_tokens

    args = parse_args(["--task", "search", "--trees", "2", "--expand-nodes", "2"])
    assert args.output_dir == "runs/compare-search"
    warm = Path("/nonexistent/warm")
    base = base_config(args, warm, 0)
    assert base.env == "prm/Search-v0" and base.judge == "rule/exact_match"  # sparse outcome
    assert json.loads(base.env_kwargs)["question_kinds"] == "multi" and base.group_size == 6
    tree = arm_config("tree-grpo", base, args)
    assert replace(tree, algo="grpo") == base
    # 2 trees, each a chain plus 2 branches regenerating half an episode on average: 4 chains' tokens
    assert chain_group_for_tokens(base.tree, 0.5) == 4 and arm_config("grpo-tokens", base, args).group_size == 4
    retrieval = arm_config("retrieval", base, args)
    assert retrieval.judge == "rule/exact_match + 0.2*rule/retrieval" and replace(retrieval, judge=base.judge) == base
    gain = arm_config("info-gain", base, args)
    assert gain.judge == "rule/exact_match + 1.0*progress/info_gain"
    ig = json.loads(gain.env_kwargs)["judge_kwargs"]["progress/info_gain"]
    assert ig == {"policy": f"hf:{warm}", "final": "gain", "outcome": "exact"}
    assert arm_config("grpo", base, args) == base  # chain at equal trajectories = the outcome-only arm


def test_search_refuses_the_math_only_comparisons(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.compare import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--task", "search", "--which", "async"])
    assert "async and roots: --task math" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_compare_search_shortened(tmp_path: Path) -> None:
    """Both search comparisons end to end, shortened (1 seed, tiny warm start, 1 step): the
    summaries, the paired-difference plots, and runs shared by name."""
    from experiments.compare import main

    flags = ["--task", "search", "--seeds", "1", "--output-dir", str(tmp_path), "--demos", "8", "--sft-steps", "2"]
    flags += ["--steps", "1", "--tasks-per-step", "1", "--eval-tasks", "2", "--eval-samples", "1", "--eval-every", "1"]
    flags += ["--hidden", "32", "--layers", "1", "--max-new-tokens", "24", "--threads", "1"]
    out = main([*flags, "--which", "all"])
    assert set(out) == {"tree", "process"}
    for which in out:
        assert (tmp_path / which / "summary.json").exists() and (tmp_path / which / "paired.png").exists()
    assert out["process"]["arms"]["outcome only"] == out["tree"]["arms"]["chain GRPO, equal trajectories"]
    assert set(out["process"]["arms"]) == {
        "outcome only",
        "retrieval credit",
        "IGPO information gain",
        "IGPO as its authors run it",
    }
    assert (tmp_path / "runs" / "seed0" / "info-gain" / "done.json").exists()
    from experiments.reeval import main as reeval

    again = reeval([*flags, "--eval-unseen", "3"])  # the finished models, on questions no training one shares
    assert set(again["comparisons"]) == {"tree", "process"} and again["warm_start_success"]["n"] == 1
    diff = again["comparisons"]["process"]["retrieval credit"]["minus_first"]
    assert diff["df"] == 0 and diff["verdict"] == "no detectable difference"  # one seed: no interval
    assert (tmp_path / "runs" / "seed0" / "grpo" / "reeval-unseen-3.json").exists()


def test_reeval_refuses_a_directory_without_a_finished_study(tmp_path: Path) -> None:
    from experiments.reeval import main as reeval

    with pytest.raises(SystemExit, match=r"no warm start at .*run the study"):
        reeval(["--seeds", "1", "--eval-unseen", "2", "--output-dir", str(tmp_path)])
    assert not (tmp_path / "warm").exists()  # nothing was trained


def test_arms_picks_runs_and_keeps_the_first_arm(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments import compare_search as cs
    from experiments.compare import chosen_arms, parse_args

    process = cs.COMPARISONS["process"]
    assert list(chosen_arms(process, "info-gain-authors").values()) == ["grpo", "info-gain-authors"]
    assert chosen_arms(process, "") == process
    assert parse_args(["--task", "search", "--which", "process", "--arms", "retrieval"]).arms == "retrieval"
    with pytest.raises(SystemExit):
        parse_args(["--task", "search", "--which", "process", "--arms", "tree-grpo"])  # an arm of the tree comparison
    assert "--arms: no arm tree-grpo in --which process" in capsys.readouterr().err


def test_the_authors_igpo_arm_is_evaluated_on_the_exact_answer() -> None:
    """Its judge scores the answer turn by F1 under progress/info_gain's own term, which held-out
    success does not read: the eval envs judge the exact answer, as every other arm's do."""
    import gymnasium as gym

    import prm_gym  # noqa: F401
    from experiments.compare import arm_config, base_config, parse_args
    from prm_gym.core.parsing import format_answer
    from prm_gym.training.config_sections import LossConfig

    assert LossConfig().outcome_terms == ("outcome",)
    args = parse_args(["--task", "search"])
    cfg = arm_config("info-gain-authors", base_config(args, Path("/nonexistent/warm"), 0), args)
    assert cfg.judge == "progress/info_gain" and cfg.eval_env_kwargs["judge"] == "rule/exact_match"
    kw = {**cfg.eval_env_kwargs, "num_tasks": 4}
    env = gym.make(cfg.env, **kw)
    try:
        _, info = env.reset(seed=0)
        task = env.unwrapped.task
        _, reward, term, _, info = env.step(format_answer(task.answer[0]))
    finally:
        env.close()
    assert term and reward == 1.0 and info["reward_outcome"] == 1.0  # the term success reads (outcome_terms)
