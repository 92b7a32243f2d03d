"""``make learn`` over seeds: is GRPO's gain over SFT larger than the spread between seeds?

One ``make learn`` run pairs its arms per held-out task, so its standard error covers which tasks
were drawn and how the sampled episodes fell, not how training fell: ``--seed`` changes the SFT
batch order and every sample, and with it the trained models. This reads several finished runs
(``python -m experiments.learn --seed N --output-dir DIR``; the held-out tasks are the same for
every seed) and prints, for each arm and held-out cell, the strict success of every seed and the
mean ± s.e. across seeds, then each comparison (GRPO minus SFT and RFT, RFT minus SFT) per seed with its
paired within-run s.e., and across seeds: the mean, its s.e. (sample s.d. / sqrt(seeds)), and the
s.d. between seeds next to the typical within-run s.e.

No torch: it reads each run's ``evals/<arm>-<set>-<mode>.json``. Usage::

    python -m experiments.learn_seeds runs/learn runs/learn-seed1 runs/learn-seed2 [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.compare_stats import mean_se, paired, rate
from experiments.learn_records import MODELS, MODES, SETS, record_file, record_key

CELLS = tuple((s, m) for s in SETS for m in MODES)
COMPARISONS = (("grpo", "sft"), ("grpo", "rft"), ("rft", "sft"))


def load_run(path: Path) -> dict[str, list[dict[str, Any]]]:
    """``{"<arm>-<set>-<mode>": records}`` for every evaluation file the run holds: in ``path/evals/``
    (a ``make learn`` output directory) or in ``path`` itself (the raw records under docs/results/)."""
    evals = path / "evals" if (path / "evals").is_dir() else path
    out: dict[str, list[dict[str, Any]]] = {}
    for arm in MODELS:
        for s, m in CELLS:
            f = record_file(evals, arm, s, m)
            if f.exists():
                try:
                    records = json.loads(f.read_text())
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise ValueError(f"{f}: not a JSON evaluation record ({e})") from None
                if not isinstance(records, list) or not records:
                    raise ValueError(f"{f}: expected a non-empty list of episode records")
                out[record_key(arm, s, m)] = records
    if not out:
        raise ValueError(f"{path}: no evaluation records (<arm>-<set>-<mode>.json) here or in evals/")
    return out


def aggregate(runs: Sequence[dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per-run and across-run figures for the cells every run holds (see the module docstring).

    Raises:
        ValueError: fewer than two runs, or two runs whose evaluations do not share their task ids.
    """
    if len(runs) < 2:
        raise ValueError(f"aggregate needs at least two runs (seeds), got {len(runs)}")
    shared = [k for k in runs[0] if all(k in r for r in runs)]
    arms: dict[str, Any] = {}
    for key in shared:
        per = [rate(r[key], "strict")[0] for r in runs]
        arms[key] = {"per_run": per, **mean_se(per)}
    comparisons: dict[str, Any] = {}
    for b, a in COMPARISONS:
        for s, m in CELLS:
            ka, kb = record_key(a, s, m), record_key(b, s, m)
            if ka not in shared or kb not in shared:
                continue
            pairs = [paired(r[ka], r[kb]) for r in runs]
            diffs = [c["diff"] for c in pairs]
            stats = mean_se(diffs)
            sd = stats["se"] * math.sqrt(stats["n"])
            comparisons[f"{b}-vs-{a}-{s}-{m}"] = {
                "per_run": [{"diff": c["diff"], "se": c["se"]} for c in pairs],
                **stats,
                "sd_between_runs": sd,
                "mean_within_run_se": sum(c["se"] for c in pairs) / len(pairs),
            }
    return {"runs": len(runs), "arms": arms, "comparisons": comparisons}


def render(result: dict[str, Any], names: Sequence[str]) -> str:
    """The two markdown tables: success per arm and cell, and the comparisons."""
    seeds = " | ".join(names)
    lines = [
        f"Strict success (%), {result['runs']} runs; mean ± s.e. across runs.",
        "",
        f"| arm | set | mode | {seeds} | mean ± s.e. |",
        "|---|---|---|" + "---|" * len(names) + "---|",
    ]
    for key, v in result["arms"].items():
        arm, s, m = key.split("-")
        cells = " | ".join(f"{p * 100:.1f}" for p in v["per_run"])
        lines.append(f"| {arm} | {s} | {m} | {cells} | {v['mean'] * 100:.1f} ± {v['se'] * 100:.1f} |")
    lines += [
        "",
        "Paired differences (points): per run ± its within-run s.e.; across runs mean ± s.e., the s.d. "
        "between runs and the mean within-run s.e.",
        "",
        f"| comparison | set | mode | {seeds} | mean ± s.e. | s.d. between runs | within-run s.e. |",
        "|---|---|---|" + "---|" * len(names) + "---|---|---|",
    ]
    for key, v in result["comparisons"].items():
        b, _, a, s, m = key.split("-")
        cells = " | ".join(f"{c['diff'] * 100:+.1f} ± {c['se'] * 100:.1f}" for c in v["per_run"])
        lines.append(
            f"| {b} − {a} | {s} | {m} | {cells} | {v['mean'] * 100:+.1f} ± {v['se'] * 100:.1f} | "
            f"{v['sd_between_runs'] * 100:.1f} | {v['mean_within_run_se'] * 100:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="make learn output directories, one per seed")
    p.add_argument("--markdown", type=Path, help="also write the tables to this file")
    args = p.parse_args(argv)
    try:
        result = aggregate([load_run(r) for r in args.runs])
    except ValueError as e:
        p.exit(2, f"learn_seeds: error: {e}\n")
    text = render(result, [r.name for r in args.runs])
    sys.stdout.write(text)
    if args.markdown:
        args.markdown.write_text(text)
    return result


if __name__ == "__main__":
    main()
