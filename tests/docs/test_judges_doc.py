"""docs/judges.md covers every built-in judge: a section naming its paper (or the standard it
follows), the formula as implemented, its knobs and a worked example that a real test checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prm_gym.rewards.registry import BUILTIN_JUDGES

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "judges.md").read_text(encoding="utf-8")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
#: What a judge's section must say, each as a marker that starts the statement.
MARKERS = ("Papers?:", "Formula", "Knobs:", "Worked example")
#: The combination options are documented like judges.
OPTIONS = ("`credit=min`", "`gate`", "`norm=renorm`")


def sections() -> dict[str, str]:
    """``### `` heading -> its text (up to the next heading of level 2 or 3)."""
    parts = re.split(r"^(#{2,3} .*)$", DOC, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2) if parts[i].startswith("### ")}


def section_of(name: str) -> str:
    found = [body for heading, body in sections().items() if name in heading]
    assert found, f"docs/judges.md has no section whose heading names {name}"
    return "\n".join(found)


@pytest.mark.parametrize("judge_id", sorted(BUILTIN_JUDGES))
def test_every_judge_has_a_complete_section(judge_id: str) -> None:
    body = section_of(f"`{judge_id}`")
    missing = [m for m in MARKERS if not re.search(m, body)]
    assert not missing, f"the section of {judge_id} lacks {missing}"
    assert TEST_REF.search(body.split("Worked example", 1)[1]), f"{judge_id}: the worked example names no test"
    assert f"`{judge_id}`" in DOC.split("## Ids", 1)[1].split("\n### ", 1)[0], f"{judge_id} is not in the Ids table"


@pytest.mark.parametrize("option", OPTIONS)
def test_every_combination_option_has_a_complete_section(option: str) -> None:
    body = section_of(option)
    missing = [m for m in MARKERS if not re.search(m, body)]
    assert not missing, f"the section of {option} lacks {missing}"


def test_every_test_the_page_names_exists() -> None:
    refs = TEST_REF.findall(DOC)
    assert len(refs) >= 20
    for path, name in refs:
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {name}\(", source, flags=re.MULTILINE), f"{path}::{name} does not exist"
