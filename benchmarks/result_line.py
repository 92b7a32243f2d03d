"""The machine-readable ``RESULT`` line every benchmark script prints, one per comparison row.

A script prints its human table as it likes, and beside it one line per row::

    RESULT {"bench": "sql", "row": "execution-match checks", "ours": 5200.0, "baseline": 2100.0,
            "baseline_name": "fresh connection + set compare", "unit": "checks/s", "better": "higher",
            "ratio": 2.48, "spread": "ours 5100-5300, baseline 2000-2200"}

``ratio`` is always "how many times better ours is": ``ours / baseline`` when higher is better,
``baseline / ours`` when lower is better, so a ratio above 1 means the suite wins. A row that could
not be measured carries ``ours``/``baseline``/``ratio`` as ``null`` and the reason in ``skipped``.
``benchmarks/run_all.py`` gathers these lines into the summary table of ``docs/benchmarks.md``.

Scripts import it as ``from result_line import emit, skipped`` (they run with ``benchmarks/`` on
``sys.path``).
"""

from __future__ import annotations

import gc
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

PREFIX = "RESULT "


def ratio(ours: float, baseline: float, better: str) -> float | None:
    """How many times better ``ours`` is than ``baseline`` (``None`` when undefined)."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}.")
    num, den = (ours, baseline) if better == "higher" else (baseline, ours)
    if den == 0 or not math.isfinite(num) or not math.isfinite(den):
        return None
    return num / den


def spread(values: Sequence[float], digits: int = 3) -> str:
    """``"min-max"`` of ``values`` with ``digits`` significant digits, for the ``spread`` field."""
    if not values:
        return ""
    return f"{min(values):.{digits}g}-{max(values):.{digits}g}"


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (a convenience so scripts need one import)."""
    return float(statistics.median(values))


def settle() -> None:
    """Collect garbage before a timed pass, so no pass starts with an earlier one's leftovers.

    The collector stays on during the pass: each side pays for the collections its own work
    triggers, as in a real run. (Switching it off is not neutral: it made skyrl-gym's SQL env
    about 3x slower and prm/SQL-v0's sqlglot-heavy step faster.)
    """
    gc.collect()


def per_call_us(fn: Callable[[], object], n: int) -> float:
    """Mean microseconds of one call of ``fn`` over ``n`` calls in a row, after :func:`settle`."""
    settle()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def emit(
    bench: str,
    row: str,
    ours: float,
    baseline: float,
    baseline_name: str,
    unit: str,
    better: str,
    spread: str = "",
    note: str = "",
    formerly: str = "",
) -> dict[str, Any]:
    """Print one ``RESULT`` line for a measured comparison row and return its record.

    ``formerly``: the name this row had on earlier pages, so the before/after note finds it.
    """
    record: dict[str, Any] = {
        "bench": bench,
        "row": row,
        "ours": float(ours),
        "baseline": float(baseline),
        "baseline_name": baseline_name,
        "unit": unit,
        "better": better,
        "ratio": ratio(float(ours), float(baseline), better),
        "spread": spread,
    }
    if note:
        record["note"] = note
    if formerly:
        record["formerly"] = formerly
    print(PREFIX + json.dumps(record), flush=True)
    return record


def skipped(bench: str, row: str, baseline_name: str, reason: str, unit: str = "") -> dict[str, Any]:
    """Print one ``RESULT`` line for a row that could not be measured, with the reason."""
    record: dict[str, Any] = {
        "bench": bench,
        "row": row,
        "ours": None,
        "baseline": None,
        "baseline_name": baseline_name,
        "unit": unit,
        "better": None,
        "ratio": None,
        "spread": "",
        "skipped": reason,
    }
    print(PREFIX + json.dumps(record), flush=True)
    return record


def parse(text: str) -> list[dict[str, Any]]:
    """Every well-formed ``RESULT`` record in a script's output, in order."""
    out = []
    for line in text.splitlines():
        if not line.startswith(PREFIX):
            continue
        try:
            record = json.loads(line[len(PREFIX) :])
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "row" in record:
            out.append(record)
    return out
