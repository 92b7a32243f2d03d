"""Evaluate a finished search study again, on questions no training question shares.

``python -m experiments.reeval <the study's compare flags> --eval-unseen 150``

Loads each seed's warm start and every arm's final model (``<run>/model``, exported when the run
finished) from a ``compare --task search`` output directory (``--output-dir``), plays the same held-out episodes with
each (``--eval-unseen`` questions whose text no training question has, ``--eval-samples`` each, the
study's temperature, the outcome judge alone), and writes ``<output-dir>/reeval-unseen-<n>/summary.json``:
per arm that every seed finished (a comparison whose first arm is missing is left out) the success
across seeds, and the paired differences against the comparison's first arm and against the warm
start, each with its t interval on n - 1 degrees of freedom and its verdict
(``compare_stats.seeds_interval``).
Each model's result is kept in ``<run>/reeval-unseen-<n>.json`` and reused when present. Every model
is evaluated on ``--device`` (``auto``: a GPU when torch sees one), recorded in the summary.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from experiments import compare, compare_stats
from experiments import compare_search as cs


def _evaluate(model_dir: Path, args: Any, seed: int, cache: Path) -> dict[str, float]:
    if cache.exists():
        result: dict[str, float] = json.loads(cache.read_text())
        return result
    from prm_gym.agents.chat import DEFAULT_SYSTEM, ChatTemplate
    from prm_gym.agents.hf import HFPolicy
    from prm_gym.core.models import load_hf
    from prm_gym.training.evaluation import evaluate

    cfg = cs.base_config(args, model_dir, seed)
    cfg = replace(cfg, progress=False)
    model, tok = load_hf(f"hf:{model_dir}", seed)
    policy = HFPolicy(model.to(args.device), tok, seed=seed, sample_dtype=cfg.sample_dtype)
    chat = ChatTemplate(policy.tokenizer, DEFAULT_SYSTEM, tools_block=cfg.tools_prompt, tool_format=cfg.tool_format)
    result = evaluate(policy, chat, cfg)
    cache.write_text(json.dumps(result))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = compare.parse_args(["--task", "search", *(sys.argv[1:] if argv is None else argv)])
    study = Path(args.output_dir)
    if not args.eval_unseen:
        raise SystemExit("reeval: give --eval-unseen N (the held-out questions to play)")
    import torch

    torch.set_num_threads(args.threads)
    tag = f"reeval-unseen-{args.eval_unseen}"
    summary: dict[str, Any] = {"eval_unseen": args.eval_unseen, "samples": args.eval_samples, "device": args.device}
    summary["comparisons"] = {}
    seeds = range(args.seeds)
    warm = [cs.warm_dir(args, s) / "sft" for s in seeds]
    missing = [str(w) for w in warm if not (w / "config.json").exists()]
    if missing:  # evaluate a finished study, never train one
        raise SystemExit(
            f"reeval: no warm start at {', '.join(missing)}; run the study (compare --task search) "
            "with the same flags and --output-dir first"
        )
    starts = [_evaluate(w, args, s, w.parent / f"{tag}.json")["success"] for s, w in zip(seeds, warm, strict=True)]
    summary["warm_start_success"] = compare_stats.mean_se(starts)
    for which, arms in cs.COMPARISONS.items():
        finals: dict[str, list[float]] = {}
        for label, name in arms.items():  # the arms every seed finished (a study run with --arms holds some)
            runs = [study / "runs" / f"seed{s}" / name for s in seeds]
            if all((r / "model" / "config.json").exists() for r in runs):
                finals[label] = [
                    _evaluate(r / "model", args, s, r / f"{tag}.json")["success"]
                    for s, r in zip(seeds, runs, strict=True)
                ]
        first = next(iter(arms))
        if first in finals:  # the differences are read against the first arm
            summary["comparisons"][which] = {
                label: {
                    "final_success": compare_stats.mean_se(v),
                    "minus_first": compare_stats.seeds_interval([a - b for a, b in zip(v, finals[first], strict=True)]),
                    "gain_over_warm_start": compare_stats.seeds_interval(
                        [a - b for a, b in zip(v, starts, strict=True)]
                    ),
                    "per_seed": v,
                }
                for label, v in finals.items()
            }
    out = study / tag
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
