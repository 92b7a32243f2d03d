"""Run every benchmark script in this folder and write docs/benchmarks.md.

Each ``bench_*.py`` measures the suite against a baseline in the same run, prints its own table
and one ``RESULT {...}`` JSON line per comparison row (see ``benchmarks/result_line.py``). This
runner records the machine (and its load), runs the scripts one after another (never in parallel,
so they do not disturb each other), gathers every ``RESULT`` line into ONE summary table at the top
of the page (ratio, raw numbers, what the baseline is), lists the rows that could not be run with
the reason, and pastes each script's raw output below.

    python benchmarks/run_all.py [--only sql,search [--update]] [--args 'envs=--kinds sql'] [--out docs/benchmarks.md]

With ``--update``, only the ``--only`` benches' rows and raw output are replaced in the existing
page (``benchmarks/page_merge.py``); every other bench's rows stay as they were, and the page's head
says which benches were rerun, when, and under what load. ``--args NAME=ARGS`` passes arguments to
one bench (``envs=--kinds sql,math``); with ``--update``, only the rows that run prints replace
theirs, the bench's other rows and raw output stay, and the rerun's raw output gets its own section.

The page closes with "Before and after": every row of this run beside the same row of the page it
replaces (``--before``, default the ``--out`` page as it was), matched by bench, row name (or the
name a renamed row had, its RESULT line's ``formerly``) and order among same-named rows.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from page_merge import CLOSING, baseline_head, bench_of, closing_rows, merge_pages, table_rows
from result_line import parse

HERE = Path(__file__).resolve().parent


def machine() -> str:
    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if "model name" in line
            ),
            platform.processor() or "unknown CPU",
        )
        if Path("/proc/cpuinfo").exists()
        else platform.processor()
    )
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}, {platform.system()}"


def load() -> str:
    """The 1/5/15-minute load averages, so a reader can judge how busy the machine was."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def _num(x: Any) -> str:
    if x is None:
        return "-"
    x = float(x)
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def summary(results: list[dict[str, Any]], failures: list[tuple[str, str]]) -> list[str]:
    """The markdown summary table of every measured row, then the rows that could not be run."""
    lines = [
        "## Summary",
        "",
        "Ratio = how many times better the suite is than the baseline on that row (ours/baseline when",
        "higher is better, baseline/ours when lower is better): above 1 the suite wins. Raw numbers are",
        "medians over the repetitions; spread is min-max over the repetitions.",
        "",
        "| bench | row | ratio | ours | baseline | unit | baseline is | spread |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    measured = [r for r in results if not r.get("skipped")]
    for r in measured:
        ratio = "-" if r.get("ratio") is None else f"**{float(r['ratio']):.2f}x**"
        better = f" ({r['better']} is better)" if r.get("better") else ""
        note = f"; {r['note']}" if r.get("note") else ""
        lines.append(
            f"| {r.get('bench', '?')} | {r['row']} | {ratio} | {_num(r.get('ours'))} | {_num(r.get('baseline'))} "
            f"| {r.get('unit', '')}{better} | {r.get('baseline_name', '')}{note} | {r.get('spread', '')} |"
        )
    behind = [r for r in measured if r.get("ratio") is not None and float(r["ratio"]) < 1.0]
    if behind:
        lines += ["", "Rows where the suite is behind its baseline (ratio below 1x), and why:", ""]
        for r in behind:
            why = r.get("note") or "no reason recorded"
            lines.append(
                f"- {r.get('bench', '?')} / {r['row']} vs {r.get('baseline_name', '?')}: "
                f"{float(r['ratio']):.2f}x; {why}"
            )
    rest = [r for r in results if r.get("skipped")]
    if rest or failures:
        lines += ["", "Rows that could not be run:", ""]
        for r in rest:
            lines.append(f"- {r.get('bench', '?')} / {r['row']} vs {r.get('baseline_name', '?')}: {r['skipped']}")
        lines += [f"- {name}: {why}" for name, why in failures]
    return [*lines, ""]


def _pair(ratio: str, ours: str, base: str) -> str:
    return f"{ratio} ({ours} / {base})" if ratio not in ("", "-") else "-"


def before_after(old_page: str, results: list[dict[str, Any]], kept: list[str] | None = None) -> list[str]:
    """The closing section: each measured row of this run beside its row on ``old_page``.

    ``kept``: closing rows of benches this run did not rerun (``--update``), left as they were and
    put in bench order among this run's rows.
    """
    old: dict[tuple[str, str], list[dict[str, str]]] = {}
    for cells in table_rows(old_page):
        old.setdefault((cells["bench"], cells["row"]), []).append(cells)
    lines = [
        CLOSING,
        "",
        "Each row of this run beside the same row of the page it replaced (ratio, then ours / baseline in",
        "the row's unit). A row whose conditions changed (see its 'baseline is' column) was measured",
        "differently before: compare the conditions, not only the numbers.",
        "",
        "| bench | row | before | after | unit |",
        "|---|---|---|---|---|",
    ]
    rows: list[str] = []
    seen: dict[tuple[str, str, str], int] = {}
    for r in results:
        if r.get("skipped"):
            continue
        name = str(r.get("formerly") or r["row"])
        same = old.get((r["bench"], name), [])
        peer = baseline_head(str(r.get("baseline_name", "")))
        if any(cells["peer"] == peer for cells in same):  # a row name shared by several baselines
            same = [cells for cells in same if cells["peer"] == peer]
        n = seen.get((r["bench"], name, peer), 0)
        seen[(r["bench"], name, peer)] = n + 1
        was = same[n] if n < len(same) else None
        before = _pair(was["ratio"], was["ours"], was["baseline"]) if was else "new row"
        after = _pair(
            "-" if r.get("ratio") is None else f"{float(r['ratio']):.2f}x", _num(r.get("ours")), _num(r.get("baseline"))
        )
        rows.append(f"| {r['bench']} | {r['row']} | {before} | {after} | {r.get('unit', '')} |")
    if kept:
        lines[6:6] = ["Rows a partial rerun (`--update`) did not measure stay as their last run wrote them.", ""]
    return [*lines, *sorted([*(kept or []), *rows], key=bench_of), ""]  # stable: each bench keeps its order


def run(script: Path, timeout_s: float, extra: Sequence[str] = ()) -> tuple[int, float, str]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(script), *extra], capture_output=True, text=True, timeout=timeout_s, cwd=HERE.parent
        )
        code, out = proc.returncode, proc.stdout + (f"\n[stderr]\n{proc.stderr[-2000:]}" if proc.returncode else "")
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        code, out = 124, f"timed out after {timeout_s:.0f}s\n{partial}"
    return code, time.perf_counter() - start, out


def page_head() -> list[str]:
    """The page's opening lines: how to regenerate it, the machine, its load, the date."""
    return [
        "# Benchmarks",
        "",
        "Regenerate with `make bench` (or `python benchmarks/run_all.py`; the peer suites of the `envs` rows",
        "come from `make bench-peers`, pinned in `benchmarks/peers/`).",
        "",
        f"Machine: {machine()}.",
        f"Load average before the run: {load()}.",
        f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "Every ratio is against a baseline measured in the same run of the same script. Every figure is",
        "the median of alternated rounds (or interleaved passes) of the systems compared, so both sides see",
        "the same machine load; each row's 'baseline is' column names its like-for-like conditions (equal",
        "threads, the same answer form, fresh query text, the same interpreter flags, the same training",
        "settings). The closing section gives each row's figure before and after this run.",
        "",
    ]


def assemble(
    head: list[str],
    rest: list[str],
    results: list[dict[str, Any]],
    before: str,
    current: str = "",
    rerun: set[str] | None = None,
    only: str = "",
    partial: frozenset[str] = frozenset(),
) -> str:
    """The page: ``head`` and ``rest`` (summary and raw output), then the before/after note against
    ``before``. With ``current`` (the page ``--update`` rewrites), only the ``rerun`` benches' rows,
    raw output and before/after rows are replaced in it; every other bench's stay as they were. A
    bench in ``partial`` ran on part of its rows (``--args``): its rows this run did not measure stay."""
    page = "\n".join(head + rest) + "\n"
    kept: list[str] = []
    if current:
        names = rerun or set()
        at = next(i for i, line in enumerate(head) if line.startswith("Load average before"))
        note = (
            f"Rows of {', '.join(sorted(names))} rerun {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
            f"(`run_all.py --only {only} --update`); for that rerun, l{head[at][1:]}"
        )
        page = merge_pages(current, page, names, note, partial)
        measured = {(str(r.get("bench")), str(r.get("formerly") or r["row"])) for r in results}
        kept = [
            line
            for line in closing_rows(current)
            if bench_of(line) not in names
            or (bench_of(line) in partial and (bench_of(line), line.split(" | ")[1].strip()) not in measured)
        ]
    return page.rstrip("\n") + "\n\n" + "\n".join(before_after(before, results, kept))


#: Arguments a bench gets here unless ``--args`` names it: its own default is a run longer than ``--timeout``.
SHORT = {"serve_load": "--minutes 1"}  # the 10-minute soak per env: python benchmarks/bench_serve_load.py


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated names, e.g. sql,search (default: all)")
    ap.add_argument("--out", default=str(HERE.parent / "docs" / "benchmarks.md"))
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed per script")
    ap.add_argument("--update", action="store_true", help="with --only: replace only those benches in --out")
    ap.add_argument(
        "--before", default="", help="the page the closing before/after note compares with (default: --out)"
    )
    ap.add_argument(
        "--args",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="arguments for one bench, e.g. 'envs=--kinds sql,math'; with --update only the rows it prints change",
    )
    args = ap.parse_args()
    before_path = Path(args.before or args.out)
    old_page = before_path.read_text() if before_path.exists() else ""
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    if args.update and not (wanted and Path(args.out).exists()):
        print("--update needs --only and an existing --out page", file=sys.stderr)
        return 2
    scripts = [s for s in sorted(HERE.glob("bench_*.py")) if not wanted or s.stem.removeprefix("bench_") in wanted]
    if not scripts:
        print(f"no benchmark matches --only {args.only!r}", file=sys.stderr)
        return 2
    extra = dict(item.split("=", 1) for item in args.args)
    head = page_head()
    body: list[str] = ["## Raw output", ""]
    results: list[dict[str, Any]] = []
    failures: list[tuple[str, str]] = []
    for script in scripts:
        print(f"running {script.name} ...", flush=True)
        before = load()
        name = script.stem.removeprefix("bench_")
        code, seconds, out = run(script, args.timeout, shlex.split(extra.get(name, SHORT.get(name, ""))))
        found = parse(out)
        for r in found:
            r.setdefault("bench", name)
        results += found
        if code != 0:
            tail = next((ln for ln in reversed(out.strip().splitlines()) if ln.strip()), "no output")
            failures.append((script.name, f"exit {code} ({tail.strip()[:200]}); rows it did not print are missing"))
        elif not found:
            failures.append((script.name, "printed no RESULT line"))
        status = "ok" if code == 0 else f"exit {code}"
        raw = "\n".join(ln for ln in out.rstrip().splitlines() if not ln.startswith("RESULT "))
        title = f"{name} (rerun with {extra[name]})" if name in extra else name
        took = f"`{script.name}`: {status}, {seconds:.0f} s, load average before it {before}."
        body += [f"### {title}", "", took, ""]
        body += ["```", raw, "```", ""]
        print(out.rstrip())
    failed = sum(1 for _, why in failures if why.startswith("exit"))
    at = next(i for i, line in enumerate(head) if line.startswith("Load average before"))
    head[at] += f" Load average after: {load()}. The machine is shared (2 cores): compare ratios, not raw numbers."
    current = Path(args.out).read_text() if args.update else ""
    partial = frozenset(extra) if args.update else frozenset()
    only = args.only + "".join(f" --args {shlex.quote(a)}" for a in args.args)
    page = assemble(head, summary(results, failures) + body, results, old_page, current, wanted, only, partial)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(page)
    print(f"wrote {args.out} ({len(scripts)} scripts, {failed} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
