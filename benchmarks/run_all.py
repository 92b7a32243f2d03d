"""Run every benchmark script in this folder and write docs/benchmarks.md.

Each ``bench_*.py`` measures the suite against a baseline in the same run and prints its own
table; this runner records the machine, runs them one after another (never in parallel, so they
do not disturb each other), and collects their output with timings and exit codes.

    python benchmarks/run_all.py [--only sql,search] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

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


def run(script: Path, timeout_s: float) -> tuple[int, float, str]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout_s, cwd=HERE.parent
        )
        code, out = proc.returncode, proc.stdout + (f"\n[stderr]\n{proc.stderr[-2000:]}" if proc.returncode else "")
    except subprocess.TimeoutExpired as exc:
        code, out = 124, f"timed out after {timeout_s:.0f}s\n{exc.stdout or ''}"
    return code, time.perf_counter() - start, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated names, e.g. sql,search (default: all)")
    ap.add_argument("--out", default=str(HERE.parent / "docs" / "benchmarks.md"))
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed per script")
    args = ap.parse_args()
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    scripts = [s for s in sorted(HERE.glob("bench_*.py")) if not wanted or s.stem.removeprefix("bench_") in wanted]
    if not scripts:
        print(f"no benchmark matches --only {args.only!r}", file=sys.stderr)
        return 2
    lines = [
        "# Benchmarks",
        "",
        f"Machine: {machine()}.",
        f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
    ]
    lines += ["Every ratio below is against a baseline measured in the same run of the same script.", ""]
    failed = 0
    for script in scripts:
        print(f"running {script.name} ...", flush=True)
        code, seconds, out = run(script, args.timeout)
        failed += code != 0
        status = "ok" if code == 0 else f"exit {code}"
        lines += [f"## {script.stem.removeprefix('bench_')}", "", f"`{script.name}`: {status}, {seconds:.0f} s.", ""]
        lines += ["```", out.rstrip(), "```", ""]
        print(out.rstrip())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} ({len(scripts)} scripts, {failed} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
