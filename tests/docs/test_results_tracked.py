"""Study records under docs/results are committed: no ignore pattern may hide them (``runs/`` once hid
every per-run record a study wrote to ``docs/results/<study>/runs/``, while the docs said they were
committed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_no_ignore_pattern_hides_a_study_record() -> None:
    paths = [
        "docs/results/some-study/runs/seed0/grpo/metrics.jsonl",
        "docs/results/some-study/runs/seed0/grpo/done.json",
        "docs/results/some-study/summary.json",
    ]
    found = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert found.stdout == "", f"ignored study records: {found.stdout}"
    on_disk = [p for p in (ROOT / "docs" / "results").rglob("*") if p.is_file()]
    tracked = set(
        subprocess.run(["git", "ls-files", "docs/results"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    )
    untracked = [str(p.relative_to(ROOT)) for p in on_disk if str(p.relative_to(ROOT)) not in tracked]
    assert not untracked, f"study records on disk but not committed: {untracked[:5]}"
