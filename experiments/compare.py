"""The comparisons of ``make compare``, each arm from the same warm start, several seeds.

``python -m experiments.compare --which tree|roots|process|async|all --seeds 5 --output-dir runs/compare``

``--task math`` (the default, below) runs them on level-1 prm/Math-v0; ``--task search`` runs
*tree* and *process* on prm/Search-v0 multi-hop questions with a sparse outcome
(:mod:`experiments.compare_search`: its arms, its warm start, its token matching) and
writes under ``runs/compare-search`` unless ``--output-dir`` says otherwise.

* **tree**: Tree-GRPO against chain GRPO with as many trajectories per task (``group_size`` =
  the trees' leaves per task): held-out success against generated tokens, read at matched tokens.
* **roots** (a diagnostic of *tree*): Tree-GRPO against chain GRPO with one trajectory per tree
  root (``group_size`` = ``--trees``), so both sample each task's first turn equally often.
* **process**: turn-level process rewards (prm/Math-v0's default judge, outcome + 0.1 format +
  0.1 tool terms) against the outcome alone (``rule/math_equiv``), at equal steps.
* **async**: synchronous rollouts against asynchronous ones (staleness 1 and 2) on
  prm/MathSlowTools-v0, whose calculator calls sleep a seeded log-normal time (heavy-tailed, as
  real tool calls are), with ``--num-workers`` rollout threads: training wall clock (evaluations
  excluded) and final held-out reward at equal steps.

Every seed first trains one SFT warm start of the small random model (the pipeline of
:mod:`experiments.demo`: a random model scores 0 and cannot learn from reward); every arm
of that seed starts from that checkpoint with the same hyperparameters, so no arm gets tuning
the other did not. Runs are cached by name under ``<output-dir>/runs/seed<k>/`` (the chain GRPO
arm of *tree* is the process-reward arm of *process*: one run, read twice). Each comparison
writes ``<output-dir>/<which>/summary.json`` and PNG plots with mean ± standard error across seeds.

Every warm start, arm and evaluation runs on ``--device`` (``auto``: a GPU when torch sees one;
:mod:`experiments.study_device`), recorded in each run's ``done.json`` and in each summary.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from experiments import HelpFormatter
from experiments import compare_search as cs
from experiments import compare_stats as st
from experiments.compare_config import study_config
from experiments.study_device import add_device_flag, resolve_device_flag
from prm_gym.training.config import AsyncConfig, TrainConfig, TreeConfig
from prm_gym.training.metrics import read_metrics

OUTCOME_ONLY = "rule/math_equiv"
SLOW_ENV = "prm/MathSlowTools-v0"
COMPARISONS: dict[str, dict[str, str]] = {
    "tree": {
        "chain GRPO": "grpo",
        "Tree-GRPO": "tree-grpo",
        "Tree-GRPO, authors' node draw": "tree-grpo-authors",  # root a candidate, with replacement
    },
    # A diagnostic of (a): chain GRPO with as many trajectories per task as Tree-GRPO has roots,
    # so both sample each task's first turn equally often.
    "roots": {"Tree-GRPO": "tree-grpo", "chain GRPO, one per tree root": "grpo-roots"},
    "process": {"turn-level process": "grpo", "outcome only": "outcome-only"},
    "async": {"sync": "sync", "async, staleness 1": "async-1", "async, staleness 2": "async-2"},
}
"""Comparison -> arm label -> run name (runs are shared between comparisons by name)."""


def comparisons(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """The comparisons of ``--task``."""
    return cs.COMPARISONS if args.task == "search" else COMPARISONS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--task", choices=["math", "search"], default="math", help="the env the comparisons run on")
    p.add_argument("--which", choices=[*COMPARISONS, "all"], default="all")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..n-1, each with its own warm start")
    p.add_argument(
        "--arms",
        default="",
        help="comma-separated run names to run (default: every arm of --which); the comparison's first arm "
        "always runs, since the paired differences are read against it (e.g. --arms info-gain-authors)",
    )
    p.add_argument("--output-dir", default=None, help="default: runs/compare (math), runs/compare-search (search)")
    p.add_argument(
        "--policy", default="hf:tiny", help="the model to warm-start: hf:tiny (sized by --hidden, --layers) or an hf id"
    )
    p.add_argument(
        "--sampler",
        choices=["hf", "vllm-engine"],
        default="hf",
        help="how the arms sample: hf (in the learner's process) or vllm-engine (vLLM in this process, a GPU)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="train only this seed's warm start and runs, no summary (run seeds in parallel processes, "
        "then once without --seed: finished runs are reused)",
    )
    p.add_argument(
        "--tokenizer",
        choices=["byte", "domain"],
        default="byte",
        help="hf:tiny's tokenizer: byte-level, or (--task search) a BPE fitted to the search world "
        "(experiments.search_tokenizer; episodes about 3.6x shorter)",
    )
    p.add_argument("--hidden", type=int, default=64, help="the small random model's width")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--demos", type=int, default=400, help="SFT demonstrations")
    p.add_argument("--sft-steps", type=int, default=1200, help="the tiny model copies digits after about 1200")
    p.add_argument("--sft-lr", type=float, default=3e-3)
    p.add_argument("--sft-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--tasks-per-step", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--eval-tasks", type=int, default=48)
    p.add_argument("--eval-samples", type=int, default=2)
    p.add_argument(
        "--eval-unseen",
        type=int,
        default=0,
        help="search: evaluate on this many test questions whose text no training question has "
        "(experiments.search_demos.unseen_questions); 0: the first --eval-tasks of the test split",
    )
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--trees", type=int, default=2, help="Tree-GRPO trees per task (M)")
    p.add_argument("--expand-nodes", type=int, default=2, help="Tree-GRPO nodes expanded per round (N)")
    p.add_argument("--expand-rounds", type=int, default=1, help="Tree-GRPO expansion rounds (L)")
    p.add_argument(
        "--branch-fraction",
        type=float,
        default=0.5,
        help="search: share of an episode a branch regenerates, sizing the equal-token chain group",
    )
    p.add_argument("--retrieval-weight", type=float, default=0.2, help="search: weight of rule/retrieval")
    p.add_argument("--info-gain-weight", type=float, default=1.0, help="search: weight of progress/info_gain")
    p.add_argument(
        "--igpo-norm",
        choices=["joint", "separate"],
        default="joint",
        help="search, arm info-gain-authors: IGPO's reward z-scoring (the authors' info_gain_norm_mode)",
    )
    p.add_argument("--micro-batch", type=int, default=16, help="learner micro-batch (trajectories)")
    p.add_argument("--num-workers", type=int, default=4, help="rollout threads of the async comparison")
    p.add_argument("--latency-median-s", type=float, default=0.3)
    p.add_argument("--latency-sigma", type=float, default=1.2)
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    add_device_flag(p)
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be at least 1 (got {args.seeds}); a standard error needs 2 or more")
    if args.seed is not None and args.seed < 0:
        p.error(f"--seed must be 0 or more (got {args.seed})")
    if args.which not in (*comparisons(args), "all"):
        p.error(f"--task {args.task} has the comparisons {sorted(comparisons(args))} (async and roots: --task math)")
    known = {name for w, arms in comparisons(args).items() if args.which in (w, "all") for name in arms.values()}
    unknown = {n.strip() for n in args.arms.split(",") if n.strip()} - known
    if unknown:
        p.error(
            f"--arms: no arm {', '.join(sorted(unknown))} in --which {args.which}; arms: {', '.join(sorted(known))}"
        )
    if args.task == "math" and (args.expand_rounds != 1 or args.sampler != "hf" or args.tokenizer != "byte"):
        p.error("--expand-rounds, --sampler and --tokenizer apply to --task search")
    if args.output_dir is None:
        args.output_dir = "runs/compare-search" if args.task == "search" else "runs/compare"
    resolve_device_flag(p, args)
    return args


def warm_start(args: argparse.Namespace, seed: int) -> Path:
    """The seed's SFT warm start (a transformers directory), trained once and reused by every arm."""
    import torch

    from experiments import demo as learn

    if args.task == "search":
        return cs.warm_start(args, seed)
    out = Path(args.output_dir) / "warm" / f"seed{seed}"
    if (out / "sft" / "config.json").exists():
        return out / "sft"
    flags = ["--policy", args.policy, "--seed", str(seed), "--hidden", str(args.hidden), "--layers", str(args.layers)]
    flags += ["--demos", str(args.demos), "--sft-steps", str(args.sft_steps), "--tool-fraction", "0.9"]
    flags += ["--sft-lr", str(args.sft_lr), "--sft-batch", str(args.sft_batch), "--device", args.device]
    largs = learn.parse_args(flags)
    torch.manual_seed(seed)
    model, tok = learn.base_model(largs)
    out.mkdir(parents=True, exist_ok=True)
    return learn.warm_start(out, largs, model, tok)


def base_config(args: argparse.Namespace, policy_dir: Path, seed: int) -> TrainConfig:
    """What every arm shares: level-1 prm/Math-v0 (or ``--task search``'s env), the warm start, one
    learning rate, one eval."""
    from experiments.demo import env_kwargs

    if args.task == "search":
        return cs.base_config(args, policy_dir, seed)
    tree = TreeConfig(num_trees=args.trees, expand_nodes=args.expand_nodes, expand_rounds=1)
    return study_config(
        args, seed, tree, 1024, env="prm/Math-v0", env_kwargs=json.dumps(env_kwargs([1])), policy=f"hf:{policy_dir}"
    )


def arm_config(name: str, base: TrainConfig, args: argparse.Namespace) -> TrainConfig:
    """The run ``name``: the base config with the one thing its arm changes."""
    if args.task == "search":
        return cs.arm_config(name, base, args)
    if name == "grpo":
        return base
    if name == "tree-grpo":
        return replace(base, algo="tree-grpo")
    if name == "tree-grpo-authors":  # AMAP-ML/Tree-GRPO tree_node.py:136-140
        return replace(base, algo="tree-grpo", tree=replace(base.tree, expand_root=True, expand_with_replacement=True))
    if name == "grpo-roots":
        return replace(base, group_size=args.trees)
    if name == "outcome-only":
        return replace(base, judge=OUTCOME_ONLY)
    latency = {"latency_median_s": args.latency_median_s, "latency_sigma": args.latency_sigma}
    slow = replace(
        base,
        env=SLOW_ENV,
        env_kwargs=json.dumps({**json.loads(base.env_kwargs), **latency}),
        num_workers=args.num_workers,
        eval=replace(base.eval, env_kwargs='{"split": "test", "latency_median_s": 0}'),  # eval plays no sleeps
    )
    staleness = {"sync": 0, "async-1": 1, "async-2": 2}[name]
    return replace(slow, asynchronous=AsyncConfig(enabled=staleness > 0, max_staleness=max(staleness, 1)))


def run_arm(name: str, cfg: TrainConfig, out: Path) -> list[dict[str, Any]]:
    """Train ``cfg`` into ``out`` (skipped when a finished run with the same config is there)."""
    from prm_gym.training.trainer import train

    done = out / "done.json"
    config = json.loads(json.dumps(asdict(cfg), default=str))
    if done.exists() and same_run(json.loads(done.read_text())["config"], config):
        return read_metrics(out)
    if out.exists():
        for f in out.iterdir():
            if f.is_file():
                f.unlink()
    print(f"== {out}", flush=True)
    t0 = time.perf_counter()
    train(replace(cfg, output_dir=str(out)))
    done.write_text(json.dumps({"config": config, "wall_s": time.perf_counter() - t0}))
    return read_metrics(out)


def same_run(done: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether a finished run's config is ``config``: a run finished before ``--device`` existed
    (``device: auto``) ran where ``auto`` resolves on this machine."""
    if done.get("device") == "auto":
        from prm_gym.training.ddp import resolve_device

        done = {**done, "device": str(resolve_device("auto"))}
    return done == config


def summarize(which: str, runs: dict[str, list[list[dict[str, Any]]]], out: Path, device: str) -> dict[str, Any]:
    """The comparison's summary (and plots) from each arm's per-seed metrics rows; ``device``: where
    this call's warm starts and runs trained and evaluated (each run's own is in its ``done.json``)."""
    curves = {arm: [st.curve(rows) for rows in seeds] for arm, seeds in runs.items()}
    summary: dict[str, Any] = {"which": which, "device": device, "arms": {}}
    first = next(iter(runs))
    finals = {arm: [st.final(rows, "eval/success") for rows in seeds] for arm, seeds in runs.items()}
    seconds = {arm: [st.train_seconds(rows) for rows in seeds] for arm, seeds in runs.items()}
    for arm, seeds in runs.items():
        starts = [c[0][2] for c in curves[arm]]
        summary["arms"][arm] = {
            "start_success": st.mean_se(starts),
            "final_success": st.mean_se(finals[arm]),
            # Paired by seed (the arms of a seed share its warm start), so the warm starts' spread cancels.
            "gain_success": st.mean_se([f - s for f, s in zip(finals[arm], starts, strict=True)]),
            # mean ± s.e. over seeds with the 95% t interval on seeds - 1 and its verdict ("gain" only
            # where the interval excludes 0); the metrics rows hold no per-task records to cluster
            "minus_first_success": st.seeds_interval([f - g for f, g in zip(finals[arm], finals[first], strict=True)]),
            "final_eval_reward": st.mean_se([st.final(rows, "eval/reward") for rows in seeds]),
            "generated_tokens": st.mean_se([c[-1][1] for c in curves[arm]]),
            "train_s": st.mean_se(seconds[arm]),
            "per_seed_final_success": finals[arm],
        }
    out.mkdir(parents=True, exist_ok=True)
    by_step = {arm: st.by_step(c) for arm, c in curves.items()}
    st.plot_curves(by_step, "training step", "held-out success", f"{which}: success vs steps", out / "success.png")
    paired = {f"{arm} - {first}": summary["arms"][arm]["minus_first_success"] for arm in list(runs)[1:]}
    st.plot_bars(
        paired, "held-out success, paired by seed", f"{which}: paired differences (± s.e.)", out / "paired.png"
    )
    if which == "tree":
        matched = st.at_tokens(curves)
        summary["at_matched_tokens"] = matched
        series = {arm: list(zip(matched["tokens"], matched[arm], strict=True)) for arm in curves}
        st.plot_curves(
            series, "generated tokens", "held-out success", "tree: success at matched tokens", out / "tokens.png"
        )
    if which == "async":
        secs = {arm: summary["arms"][arm]["train_s"] for arm in runs}
        summary["speedup_vs_sync"] = {  # sync's seconds over the arm's, per seed: above 1 the arm is faster
            arm: st.mean_se([a / b for a, b in zip(seconds[first], seconds[arm], strict=True)]) for arm in runs
        }
        st.plot_bars(secs, "training seconds (evals excluded)", "async: wall clock at equal steps", out / "wall.png")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def chosen_arms(arms: dict[str, str], names: str) -> dict[str, str]:
    """``arms`` (label -> run name) cut to the run names in ``names`` (comma-separated; empty: all),
    the first arm kept (the paired differences are read against it)."""
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    first = next(iter(arms))
    return {label: name for label, name in arms.items() if not wanted or name in wanted or label == first}


def compare(which: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run (or reuse) every arm of ``which`` for every seed, then summarise."""
    root = Path(args.output_dir)
    arms = chosen_arms(comparisons(args)[which], args.arms)
    runs: dict[str, list[list[dict[str, Any]]]] = {arm: [] for arm in arms}
    for seed in range(args.seeds) if args.seed is None else [args.seed]:
        base = base_config(args, warm_start(args, seed), seed)
        for arm, name in arms.items():
            runs[arm].append(run_arm(name, arm_config(name, base, args), root / "runs" / f"seed{seed}" / name))
    if args.seed is not None:
        return {}
    summary = summarize(which, runs, root / which, args.device)
    print(table(summary), flush=True)
    return summary


def table(summary: dict[str, Any]) -> str:
    """A markdown table of the summary (mean ± s.e. across seeds)."""

    def f(x: dict[str, Any], pct: bool = True) -> str:
        return f"{x['mean']:.1%} ± {x['se']:.1%}" if pct else f"{x['mean']:.2f} ± {x['se']:.2f}"

    first = next(iter(summary["arms"]))
    lines = [
        f"### {summary['which']}",
        f"| arm | held-out success, start | final | final - start | final - {first} (paired) "
        "| 95% interval, t(seeds - 1) | verdict | final eval reward | generated tokens | train s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in summary["arms"].items():
        tok, sec = a["generated_tokens"], a["train_s"]
        d = a["minus_first_success"]
        cells = ["", "", ""] if arm == first else [f(d), f"[{d['lo']:+.1%}, {d['hi']:+.1%}]", d["verdict"]]
        paired = " | ".join(cells)
        lines.append(
            f"| {arm} | {f(a['start_success'])} | {f(a['final_success'])} | {f(a['gain_success'])} | {paired} "
            f"| {f(a['final_eval_reward'], False)} | {tok['mean']:.0f} ± {tok['se']:.0f} "
            f"| {sec['mean']:.0f} ± {sec['se']:.0f} |"
        )
    speedup = summary.get("speedup_vs_sync")
    if speedup:
        lines += ["", "| arm | speed-up over sync (sync's train s / the arm's, per seed) |", "|---|---|"]
        lines += [f"| {arm} | {x['mean']:.2f}x ± {x['se']:.2f} |" for arm, x in speedup.items()]
    matched = summary.get("at_matched_tokens")
    if matched:
        arms = [a for a in summary["arms"]]
        lines += ["", "| generated tokens | " + " | ".join(arms) + " |", "|---" * (len(arms) + 1) + "|"]
        for i, t in enumerate(matched["tokens"]):
            lines.append(f"| {t:.0f} | " + " | ".join(f(matched[a][i]) for a in arms) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the comparisons asked for; returns ``{which: summary}``."""
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    order = [w for w in ("process", "tree", "roots", "async") if w in comparisons(args)]
    order = order if args.which == "all" else [args.which]
    return {which: compare(which, args) for which in order}


if __name__ == "__main__":
    main()
