"""Every arm's held-out success and every pair's paired difference in one make learn run, from its committed
per-task records (``<model>-<set>-<mode>.json``, :mod:`experiments.learn_records`), for the tables of
docs/learning.md; make learn's own summary compares GRPO with each arm only.

``python -m experiments.learn_cells DIR [DIR ...]``: a record is read from the first folder that holds it (so
an arm scored in an earlier run's folder, the same model on the same tasks, is named by that folder).
Prints markdown: per arm strict success with its template-clustered s.e. and the templates it solves; per
pair ``b - a`` the difference, discordant counts and the 95% interval on t(templates - 1) with its verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from experiments import HelpFormatter  # noqa: E402
from experiments.compare_stats import clustered_rate, paired, rate  # noqa: E402
from experiments.learn_records import MODES, SETS, record_file  # noqa: E402

ARMS = ("sft", "sft_cont", "rft", "grpo")
PAIRS = (("sft_cont", "grpo"), ("rft", "grpo"), ("sft", "grpo"), ("sft", "sft_cont"), ("sft", "rft"))
"""``(a, b)``: the tables read ``b - a``; GRPO minus its control first, as pre-registered."""


def load(folders: list[Path], model: str, which: str, mode: str) -> list[dict[str, Any]] | None:
    for folder in folders:
        path = record_file(folder, model, which, mode)
        if path.exists():
            return list(json.loads(path.read_text()))
    return None


def cells(folders: list[Path]) -> list[str]:
    lines = ["| arm | set | mode | strict (clustered s.e.) | templates solved |", "|---|---|---|---|---|"]
    for arm in ARMS:
        for which in SETS:
            for mode in MODES:
                recs = load(folders, arm, which, mode)
                if recs is None:
                    continue
                p, _ = rate(recs, "strict")
                cl = clustered_rate(recs, "strict")
                solved = len({r["template"] for r in recs if r["strict"]}) if "template" in recs[0] else None
                total = len({r["template"] for r in recs}) if "template" in recs[0] else None
                se = f" ± {cl['se']:.1%}" if cl else ""
                lines.append(f"| {arm} | {which} | {mode} | {p:.1%}{se} | {solved} of {total} |")
    lines += ["", "| b − a | set | mode | difference | b only / a only | 95% interval | p | verdict |"]
    lines.append("|---|---|---|---|---|---|---|---|")
    for a, b in PAIRS:
        for which in SETS:
            for mode in MODES:
                ra, rb = load(folders, a, which, mode), load(folders, b, which, mode)
                if ra is None or rb is None:
                    continue
                c = paired(ra, rb)
                k = c["clustered"]
                interval = f"[{k['lo']:+.1%}, {k['hi']:+.1%}], t({k['df']})" if k else "–"
                p_value = f"{k['p']:.3f}" if k and "p" in k else "–"
                lines.append(
                    f"| {b} − {a} | {which} | {mode} | {c['diff']:+.1%} | {c['b_only']} / {c['a_only']} | "
                    f"{interval} | {p_value} | {k['verdict'] if k else '–'} |"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("folders", nargs="+", type=Path, help="folders of per-task records, searched in order")
    args = p.parse_args(argv)
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        p.error(f"not a folder: {', '.join(missing)}")
    print("\n".join(cells(args.folders)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
