"""Put a partial rerun's rows into an existing benchmarks page (``run_all.py --only NAMES --update``).

A page written by ``run_all.py`` has a head (machine, load, date), a ``## Summary`` table with one
row per RESULT line (first cell: the bench name), two optional bullet lists (rows behind their
baseline, rows that could not be run; each bullet starts with the bench name or its script), then
``## Raw output`` with one ``### <bench>`` section per script. :func:`merge_pages` keeps every part
of the old page that belongs to another bench and takes the rerun benches' parts from the new page,
so rerunning one script does not cost a rerun of all of them.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

BEHIND = "Rows where the suite is behind its baseline (ratio below 1x), and why:"
#: The closing section's title; a merge drops the old one (``run_all`` writes a new one, keeping the
#: old one's rows of the benches not rerun: :func:`closing_rows`).
CLOSING = "## Before and after"
SKIPPED = "Rows that could not be run:"
_SCRIPT_RE = re.compile(r"bench_(\w+)\.py:")


@dataclass
class Page:
    """A benchmarks page cut into its parts (each list holds whole lines)."""

    head: list[str] = field(default_factory=list)
    intro: list[str] = field(default_factory=list)  # "## Summary" down to the table's separator line
    rows: list[str] = field(default_factory=list)
    behind: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    raw: dict[str, list[str]] = field(default_factory=dict)  # bench name -> its "### name" section


def bench_of(line: str) -> str:
    """The bench a summary row (``| envs | ...``) or bullet (``- envs / ...``, ``- bench_x.py: ...``) is about."""
    if line.startswith("| "):
        return line.split("|")[1].strip()
    found = _SCRIPT_RE.match(line[2:])
    return found.group(1) if found else line[2:].split(" / ")[0].strip()


def split_page(text: str) -> Page:
    """Cut ``text`` (a page ``run_all.py`` wrote) into its parts."""
    page, part, raw_name = Page(), "head", ""
    for line in text.splitlines():
        if line == CLOSING:
            break
        if line == "## Summary":
            part = "intro"
        elif line == "## Raw output":
            part = "raw"
        elif line in (BEHIND, SKIPPED):
            part = "behind" if line == BEHIND else "skipped"
            continue
        if part == "head":
            page.head.append(line)
        elif part == "intro":
            page.intro.append(line)
            part = "rows" if line.startswith("|---") else part
        elif part in ("rows", "behind", "skipped") and line.startswith(("| ", "- ")):
            getattr(page, part).append(line)
        elif part == "raw" and line.startswith("### "):
            raw_name = line[4:].strip()
            page.raw[raw_name] = [line]
        elif part == "raw" and raw_name:
            page.raw[raw_name].append(line)
    return page


def table_rows(text: str) -> list[dict[str, str]]:
    """The summary table's rows of a page: bench, row, ratio (bold removed), ours, baseline, unit, and
    ``peer``: the baseline's name before its conditions (see :func:`baseline_head`)."""
    out = []
    for line in split_page(text).rows:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) >= 6:
            keys = ("bench", "row", "ratio", "ours", "baseline", "unit")
            row = dict(zip(keys, [*cells[:2], cells[2].strip("*"), *cells[3:6]], strict=True))
            out.append(row | {"peer": baseline_head(cells[6]) if len(cells) > 6 else ""})
    return out


def baseline_head(baseline_is: str) -> str:
    """A row's baseline name without its conditions: the text up to the first ``,`` or ``;``."""
    return re.split(r"[,;]", baseline_is)[0].strip()


def closing_rows(text: str) -> list[str]:
    """The table rows (``| bench | row | before | after | unit |``) of a page's closing section."""
    lines = text.split(f"\n{CLOSING}\n", 1)[1].splitlines() if f"\n{CLOSING}\n" in text else []
    return [line for line in lines if line.startswith("| ") and not line.startswith("| bench |")]


def row_prefix(line: str) -> str:
    """What identifies a summary row across runs, as its bullets open: ``- <bench> / <row> vs
    <baseline>`` (the baseline's name up to its first ``,`` or ``;``, before the conditions)."""
    cells = line.strip().strip("|").split(" | ")
    return f"- {cells[0].strip()} / {cells[1].strip()} vs {baseline_head(cells[6])}"


def _redone(new: Page, partial: frozenset[str]) -> set[str]:
    """The rows a partial rerun of the benches ``partial`` measured (:func:`row_prefix`), and the
    rows it could not run (a skipped row's bullet before its reason)."""
    rows = {row_prefix(line) for line in new.rows if bench_of(line) in partial}
    return rows | {line.split(": ", 1)[0] for line in new.skipped if bench_of(line) in partial}


def _merge(
    old: list[str],
    new: list[str],
    names: set[str],
    partial: frozenset[str] = frozenset(),
    redone: AbstractSet[str] = frozenset(),
) -> list[str]:
    """``old`` without the lines of ``names``, plus ``new``'s lines of ``names``, in bench order.

    A bench in ``partial`` was rerun on part of its rows: only its old lines about the rows
    ``redone`` go.
    """

    def stays(line: str) -> bool:
        if bench_of(line) not in partial:
            return bench_of(line) not in names
        if line.startswith("| "):
            return row_prefix(line) not in redone
        return not any(line.startswith(p) for p in redone)

    kept = [line for line in old if stays(line)] + [line for line in new if bench_of(line) in names]
    return sorted(kept, key=bench_of)  # stable: each bench keeps its own rows' order


def merge_pages(old_text: str, new_text: str, names: set[str], note: str, partial: frozenset[str] = frozenset()) -> str:
    """The old page with the benches ``names`` replaced by the new page's, and ``note`` added to its head.

    Benches in ``partial`` were rerun on part of their rows (``run_all.py --args``): their other
    rows and their old raw output stay; the rerun's raw output is its own section.
    """
    old, new = split_page(old_text), split_page(new_text)
    head = list(old.head)
    while head and not head[-1]:
        head.pop()
    redone = _redone(new, partial)
    lines = [*head, note, "", *(old.intro or new.intro), *_merge(old.rows, new.rows, names, partial, redone)]
    for title, part in ((BEHIND, "behind"), (SKIPPED, "skipped")):
        bullets = _merge(getattr(old, part), getattr(new, part), names, partial, redone)
        if bullets:
            lines += ["", title, "", *bullets]
    lines += ["", "## Raw output", ""]
    raw = {k: v for k, v in old.raw.items() if k.split(" ")[0] not in names or k in partial}
    raw |= {k: v for k, v in new.raw.items() if k.split(" ")[0] in names}
    for name in sorted(raw):
        section = list(raw[name])
        while section and not section[-1]:
            section.pop()
        lines += [*section, ""]
    return "\n".join(lines) + "\n"
