"""Ablation of the training recipes (issue 13): each option on and off, same budget, several seeds.

A small SFT warm start (:mod:`experiments.demo`'s demonstrations, a 2-layer 64-wide Llama with the
byte-level tokenizer, trained once and shared) is followed, per arm and seed, by a few GRPO steps
on ``prm/Math-v0`` levels 1-2 through the real env, judges and trainer, with two optimiser updates
per batch (so the PPO ratio leaves 1 and the clip range matters). Every arm changes exactly one
option against ``baseline``. Reported per arm, over seeds: the held-out reward after training
(the trainer's final eval: test split of the same levels 1-2, 16 tasks x 2 samples), its change
against the baseline of the same seed (paired mean and standard error), and wall time as a ratio
against the baseline (a warm-up run goes first).

    .venv/bin/python benchmarks/ablate_recipes.py                   # all arms, 3 seeds
    .venv/bin/python benchmarks/ablate_recipes.py --arms baseline "roc oversample 2" --seeds 0 1
    .venv/bin/python benchmarks/ablate_recipes.py --warm-start runs/learn/sft \
        --env-kwargs '{"levels": [1], "max_turns": 3, "num_tasks": 2000}' \
        --steps 15 --eval-samples 4 --max-new-tokens 96

``--warm-start`` takes an existing SFT directory instead of training the small one, e.g. the
stronger warm start ``make learn`` leaves in ``runs/learn/sft`` (about 66 % held-out success on
level 1), so the arms start where the outcome reward has signal.

A paired difference whose t statistic (mean / s.e. over seeds) stays below the two-sided 95 %
Student-t critical value (4.30 for 3 seeds) is reported as "no measurable effect"; the test is
per arm, not corrected for the number of arms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from experiments.demo import warm_start
from prm_gym.training.config import EvalConfig, LossConfig, RecipeConfig, SamplingConfig, TrainConfig

JUDGE = "rule/math_equiv + 0.1*rule/format + 0.1*rule/tool"
ENV_KWARGS = '{"levels": [1, 2], "max_turns": 3, "num_tasks": 24}'

#: arm -> the TrainConfig fields it changes against the baseline.
ARMS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "clip-higher 0.28": {"loss": {"clip_high": 0.28}},
    "seq-mean-token-mean": {"loss": {"aggregation": "seq-mean-token-mean"}},
    "lite-ppo batch std": {"loss": {"std_scope": "batch"}},
    "overlong buffer 16": {"loss": {"overlong_buffer": 16, "overlong_penalty": 0.5}},
    "dynamic resample": {"recipes": {"dynamic_sampling": "resample", "max_resample_rounds": 2}},
    "roc oversample 2": {"recipes": {"roc_oversample": 2.0}},
    "difficulty filter": {"recipes": {"difficulty_filter": True}},
    "curriculum": {"recipes": {"curriculum": True, "curriculum_promote": 0.3}},
    "gate=1 (G-RA)": {"judge": JUDGE + " ; gate=1"},
    "tool/efficiency 0.2": {"judge": JUDGE + " + 0.2*tool/efficiency"},
}


def arm_config(
    policy: Path,
    out: Path,
    arm: str,
    seed: int,
    steps: int,
    env_kwargs: str = ENV_KWARGS,
    eval_samples: int = 2,
    max_new_tokens: int = 48,
) -> TrainConfig:
    """The GRPO run of ``arm`` with ``seed``: the baseline with the arm's fields replaced."""
    change = ARMS[arm]
    base = TrainConfig(
        env_kwargs=env_kwargs,
        policy=f"hf:{policy}",
        judge=change.get("judge", JUDGE),
        tools_prompt="compact",
        group_size=4,
        tasks_per_step=2,
        steps=steps,
        lr=3e-4,
        seed=seed,
        output_dir=str(out / f"{arm.replace(' ', '_')}-{seed}"),
        checkpoint_every=0,
        tensorboard=False,
        progress=False,
        sampling=SamplingConfig(max_new_tokens=max_new_tokens, max_context_tokens=1024),
        loss=LossConfig(micro_batch_size=8, updates_per_batch=2, **change.get("loss", {})),
        recipes=RecipeConfig(**change.get("recipes", {})),
        eval=EvalConfig(env_kwargs='{"split": "test"}', num_tasks=16, samples=eval_samples),
    )
    return base


def run_arm(cfg: TrainConfig) -> tuple[float, float]:
    """``(final held-out reward, wall seconds)`` of one training run."""
    from prm_gym.training.trainer import train

    t0 = time.perf_counter()
    train(cfg)
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]
    return float([r for r in rows if "eval/reward" in r][-1]["eval/reward"]), wall


#: two-sided 95 % Student-t critical values by degrees of freedom (n seeds - 1).
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def summarise(results: dict[str, dict[int, tuple[float, float]]]) -> list[str]:
    """Markdown rows: arm, reward mean +- sd, paired diff +- s.e., verdict, time ratio."""
    base = results["baseline"]
    lines = [
        "| arm | held-out reward (mean +- sd) | vs baseline (paired mean +- s.e.) | verdict | time ratio (median) |",
        "|---|---|---|---|---|",
    ]
    for arm, per_seed in results.items():
        seeds = sorted(per_seed)
        rew = [per_seed[s][0] for s in seeds]
        sd = statistics.stdev(rew) if len(rew) > 1 else 0.0
        diffs = [per_seed[s][0] - base[s][0] for s in seeds if s in base]
        mean_d = statistics.fmean(diffs) if diffs else 0.0
        se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
        verdict = "baseline" if arm == "baseline" else "no measurable effect"
        crit = T95.get(len(diffs) - 1, 2.0)
        if arm != "baseline" and se > 0 and abs(mean_d) > crit * se:
            verdict = "better" if mean_d > 0 else "worse"
        ratio = statistics.median([per_seed[s][1] / base[s][1] for s in seeds if s in base])
        lines.append(
            f"| {arm} | {statistics.fmean(rew):+.3f} +- {sd:.3f} | {mean_d:+.3f} +- {se:.3f} "
            f"| {verdict} | {ratio:.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", default="runs/ablate")
    p.add_argument("--arms", nargs="*", default=list(ARMS))
    p.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--sft-steps", type=int, default=150)
    p.add_argument("--warm-start", default="", help="an existing SFT directory (e.g. runs/learn/sft)")
    p.add_argument("--env-kwargs", default=ENV_KWARGS, help="prm/Math-v0 kwargs of the GRPO runs")
    p.add_argument("--eval-samples", type=int, default=2, help="held-out samples per task (16 tasks)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="per turn (make learn's warm start needs 96)")
    p.add_argument("--from-json", default="", help="only re-print the table of an earlier ablation.json")
    args = p.parse_args(argv)
    if args.from_json:
        raw = json.loads(Path(args.from_json).read_text())
        print("\n".join(summarise({a: {int(k): tuple(v) for k, v in r.items()} for a, r in raw.items()})))
        return
    torch.set_num_threads(1)
    out = Path(args.output_dir)
    policy = Path(args.warm_start) if args.warm_start else out / "sft"
    if not (policy / "config.json").exists():
        if args.warm_start:
            p.error(f"--warm-start {policy}: no config.json there (run `make learn` first)")
        sft_args = argparse.Namespace(
            seed=0, hidden=64, layers=2, heads=4, demos=400, sft_steps=args.sft_steps, sft_lr=3e-3, sft_batch=8
        )
        t0 = time.perf_counter()
        warm_start(out, sft_args)
        print(f"SFT warm start: {time.perf_counter() - t0:.0f} s", flush=True)
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arms {unknown}; choose from {list(ARMS)}")
    arms = ["baseline", *[a for a in args.arms if a != "baseline"]]
    results: dict[str, dict[int, tuple[float, float]]] = {a: {} for a in arms}
    run_arm(arm_config(policy, out / "warmup", "baseline", 99, 1, args.env_kwargs, 1))  # warm-up (imports, caches)
    for seed in args.seeds:
        for arm in arms:
            cfg = arm_config(
                policy, out, arm, seed, args.steps, args.env_kwargs, args.eval_samples, args.max_new_tokens
            )
            results[arm][seed] = run_arm(cfg)
            print(
                f"seed {seed} {arm}: reward {results[arm][seed][0]:+.3f} in {results[arm][seed][1]:.1f} s", flush=True
            )
    table = summarise(results)
    print("\n".join(table))
    (out / "ablation.md").write_text("\n".join(table) + "\n")
    (out / "ablation.json").write_text(json.dumps({a: {str(s): v for s, v in r.items()} for a, r in results.items()}))


if __name__ == "__main__":
    main()
