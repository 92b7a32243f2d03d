"""``make learn`` over seeds: is GRPO's gain over SFT larger than the spread between seeds?

One ``make learn`` run pairs its arms per held-out task, so its standard error covers which tasks
were drawn and how the sampled episodes fell, not how training fell: ``--seed`` changes the SFT
batch order and every sample, and with it the trained models. This reads several finished runs
(``python -m experiments.learn --seed N --output-dir DIR``; the held-out tasks are the same for
every seed) and prints, for each arm and held-out cell, the strict success of every seed and the
mean ± s.e. across seeds, then each comparison (GRPO minus SFT, SFT continued and RFT; RFT minus SFT) per seed with its
paired within-run s.e. per task and clustered by template (the unit of generalisation: the tasks of
one phrasing succeed or fail together), and across seeds: the mean, its s.e. (sample s.d. /
sqrt(seeds)) with the 95% t interval on seeds - 1 degrees of freedom, the s.d. between seeds next to
the typical within-run s.e., and the per-task differences averaged over seeds with their
template-clustered interval. A difference is called a gain only where its 95% interval excludes 0
(across seeds: both intervals). Runs with ``--heldout-seed seed`` hold out other templates each, so no
task is in every run: the pooled interval is left out and the seeds' interval alone gives the verdict.
``--per-template`` adds GRPO minus SFT per held-out template.

No torch: it reads each run's ``evals/<arm>-<set>-<mode>.json``. Usage::

    python -m experiments.learn_seeds runs/learn runs/learn-seed1 runs/learn-seed2 [--markdown out.md] [--per-template]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments import HelpFormatter
from experiments.compare_stats import (
    clustered_mean,
    clustered_rate,
    paired,
    per_template,
    rate,
    seeds_interval,
    templates_of,
)
from experiments.learn_records import MODELS, MODES, SETS, record_file, record_key

CELLS = tuple((s, m) for s in SETS for m in MODES)
COMPARISONS = (("grpo", "sft"), ("grpo", "sft_cont"), ("grpo", "rft"), ("rft", "sft"))
"""(b, a): b minus a, where every run holds both arms; GRPO minus SFT continued is its control (the
same number of updates without RL), absent from runs older than that arm."""


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


def _pts(x: float, sign: bool = True) -> str:
    """``x`` (a share) in points, one decimal."""
    return f"{x * 100:+.1f}" if sign else f"{x * 100:.1f}"


def _ci(c: dict[str, Any], sign: bool = True) -> str:
    """A 95% interval in points with its degrees of freedom: ``[-14.1, +22.1], t(2)``."""
    return f"[{_pts(c['lo'], sign)}, {_pts(c['hi'], sign)}], t({c['df']})"


def _pooled(runs: Sequence[dict[str, list[dict[str, Any]]]], ka: str, kb: str) -> dict[str, Any] | None:
    """``kb`` minus ``ka`` per task averaged over runs, then clustered by template (None without
    templates, or when the runs do not hold the same tasks with the same templates)."""
    sums: dict[str, float] = {}
    groups: dict[str, str] = {}
    held = [{x["task_id"]: str(x.get("template")) for x in r[ka]} for r in runs]
    if any(h != held[0] for h in held[1:]):
        return None  # the runs hold out other tasks (a rotating --heldout-seed): no task is in every run
    for r in runs:
        if templates_of(r[ka]) is None or templates_of(r[kb]) is None:
            return None
        by = {x["task_id"]: int(bool(x["strict"])) for x in r[ka]}
        for x in r[kb]:
            sums[x["task_id"]] = sums.get(x["task_id"], 0.0) + int(bool(x["strict"])) - by[x["task_id"]]
            groups[x["task_id"]] = str(x["template"])
    ids = sorted(sums)
    if len(set(groups.values())) < 2:
        return None
    return clustered_mean([sums[i] / len(runs) for i in ids], [groups[i] for i in ids])


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
        clustered = [clustered_rate(r[key], "strict") for r in runs]
        arms[key] = {"per_run": per, "per_run_clustered_se": [c["se"] if c else None for c in clustered]}
        arms[key].update(seeds_interval(per))
    comparisons: dict[str, Any] = {}
    for b, a in COMPARISONS:
        for s, m in CELLS:
            ka, kb = record_key(a, s, m), record_key(b, s, m)
            if ka not in shared or kb not in shared:
                continue
            pairs = [paired(r[ka], r[kb]) for r in runs]
            diffs = [c["diff"] for c in pairs]
            stats = seeds_interval(diffs)
            sd = stats["se"] * math.sqrt(stats["n"])
            clustered = [c["clustered"] for c in pairs]
            pooled = _pooled(runs, ka, kb)
            both = [stats["verdict"]] + ([pooled["verdict"]] if pooled else [])
            entry: dict[str, Any] = {
                "per_run": [{"diff": c["diff"], "se": c["se"], "clustered": c["clustered"]} for c in pairs],
                **stats,
                "sd_between_runs": sd,
                "mean_within_run_se": sum(c["se"] for c in pairs) / len(pairs),
                "mean_within_run_clustered_se": (
                    sum(c["se"] for c in clustered if c) / len(clustered) if all(clustered) else None
                ),
                "pooled_clustered": pooled,
                # a gain must clear both the seeds' interval and the templates' (pooled) one
                "verdict": both[0] if len(set(both)) == 1 else "no detectable difference",
                "seeds_verdict": stats["verdict"],
            }
            if (b, a) == ("grpo", "sft") and pooled is not None:
                entry["per_template"] = [per_template(r[ka], r[kb]) for r in runs]
            comparisons[f"{b}-vs-{a}-{s}-{m}"] = entry
    return {"runs": len(runs), "arms": arms, "comparisons": comparisons}


def render(result: dict[str, Any], names: Sequence[str], templates: bool = False) -> str:
    """The markdown tables: success per arm and cell, the comparisons per run and across runs, and
    with ``templates`` GRPO minus SFT per held-out template."""
    seeds = " | ".join(names)
    dash = "–"
    lines = [
        f"Strict success (%), {result['runs']} runs: per run ± its template-clustered s.e.; across runs "
        "mean ± s.e. and the 95% interval on t(runs − 1).",
        "",
        f"| arm | set | mode | {seeds} | mean ± s.e. | 95% interval |",
        "|---|---|---|" + "---|" * len(names) + "---|---|",
    ]
    for key, v in result["arms"].items():
        arm, s, m = key.split("-")
        cells = " | ".join(
            _pts(p, False) + (f" ± {_pts(se, False)}" if se is not None else "")
            for p, se in zip(v["per_run"], v["per_run_clustered_se"], strict=True)
        )
        lines.append(
            f"| {arm} | {s} | {m} | {cells} | {_pts(v['mean'], False)} ± {_pts(v['se'], False)} | {_ci(v, False)} |"
        )
    lines += [
        "",
        "Paired differences per run (points): the per-task s.e. (tasks as independent), the s.e. clustered "
        'by template (CR1, G templates) and its 95% interval on t(G − 1); "gain" only where that interval '
        "excludes 0.",
        "",
        "| comparison | set | mode | run | difference | per-task s.e. | clustered s.e. (G) | 95% interval | p "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, v in result["comparisons"].items():
        b, _, a, s, m = key.split("-")
        for name, c in zip(names, v["per_run"], strict=True):
            cl = c["clustered"]
            tail = (
                f"{_pts(cl['se'], False)} ({cl['clusters']}) | {_ci(cl)} | {cl['p']:.2f} | {cl['verdict']}"
                if cl
                else f"{dash} | {dash} | {dash} | {dash}"
            )
            lines.append(f"| {b} − {a} | {s} | {m} | {name} | {_pts(c['diff'])} | {_pts(c['se'], False)} | {tail} |")
    lines += [
        "",
        "Across runs (points): mean ± s.e. over runs and the 95% interval on t(runs − 1) (the held-out tasks are "
        "the same in every run, so this interval holds the templates fixed); the s.d. between runs next to the "
        "mean within-run s.e. (per task / clustered); and the per-task differences averaged over runs, clustered "
        "by template, with the 95% interval on t(G − 1) (this one holds the runs' training fixed). The verdict "
        'says "gain" only where both intervals exclude 0.',
        "",
        f"| comparison | set | mode | {seeds} | mean ± s.e. | 95% interval | p | s.d. between runs "
        "| within-run s.e. | pooled, clustered | pooled 95% interval | verdict |",
        "|---|---|---|" + "---|" * len(names) + "---|---|---|---|---|---|---|---|",
    ]
    for key, v in result["comparisons"].items():
        b, _, a, s, m = key.split("-")
        cells = " | ".join(_pts(c["diff"]) for c in v["per_run"])
        within = _pts(v["mean_within_run_se"], False)
        if v["mean_within_run_clustered_se"] is not None:
            within += f" / {_pts(v['mean_within_run_clustered_se'], False)}"
        pooled = v["pooled_clustered"]
        pooled_cells = (
            f"{_pts(pooled['mean'])} ± {_pts(pooled['se'], False)} | {_ci(pooled)}" if pooled else f"{dash} | {dash}"
        )
        lines.append(
            f"| {b} − {a} | {s} | {m} | {cells} | {_pts(v['mean'])} ± {_pts(v['se'], False)} | {_ci(v)} | "
            f"{v['p']:.2f} | {_pts(v['sd_between_runs'], False)} | {within} | {pooled_cells} | {v['verdict']} |"
        )
    if templates:
        lines += _template_tables(result, names)
    return "\n".join(lines) + "\n"


def _template_tables(result: dict[str, Any], names: Sequence[str]) -> list[str]:
    """Per held-out template, GRPO minus SFT: the tasks, each arm's successes per run and the difference."""
    lines: list[str] = []
    for m in MODES:
        v = result["comparisons"].get(f"grpo-vs-sft-templates-{m}")
        if not v or "per_template" not in v:
            continue
        lines += [
            "",
            f"GRPO − SFT per held-out template, {m}: per run SFT / GRPO successes (difference in points), and "
            "the difference averaged over runs.",
            "",
            "| template | n | " + " | ".join(names) + " | mean |",
            "|---|---|" + "---|" * len(names) + "---|",
        ]
        for i, row in enumerate(v["per_template"][0]):
            rows = [per[i] for per in v["per_template"]]
            cells = " | ".join(f"{r['a']} / {r['b']} ({_pts(r['diff'])})" for r in rows)
            mean = sum(r["diff"] for r in rows) / len(rows)
            lines.append(f"| {row['template']} | {row['n']} | {cells} | {_pts(mean)} |")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="make learn output directories, one per seed")
    p.add_argument("--markdown", type=Path, help="also write the tables to this file")
    p.add_argument("--per-template", action="store_true", help="also print GRPO − SFT per held-out template")
    args = p.parse_args(argv)
    try:
        result = aggregate([load_run(r) for r in args.runs])
    except ValueError as e:
        p.exit(2, f"learn_seeds: error: {e}\n")
    text = render(result, [r.name for r in args.runs], templates=args.per_template)
    sys.stdout.write(text)
    if args.markdown:
        args.markdown.write_text(text)
    return result


if __name__ == "__main__":
    main()
