"""docs/envs/*.md are exactly what docs/gen_env_docs.py renders from the env docstrings."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from prm_gym.envs.base import ToolEnv

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "gen_env_docs.py"


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_env_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_env_docs"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_committed_env_pages_match_the_docstrings() -> None:
    done = _run("--check")
    assert done.returncode == 0, f"{done.stderr}\nrun: python docs/gen_env_docs.py"
    pages = {p.name for p in (ROOT / "docs" / "envs").glob("*.md")}
    assert {"math.md", "code.md", "sql.md", "search.md", "custom.md", "README.md"} <= pages


def test_check_names_a_stale_page(tmp_path: Path) -> None:
    assert _run("--out", str(tmp_path)).returncode == 0
    page = tmp_path / "sql.md"
    assert "# prm/SQL-v0" in page.read_text() and "## Version History" in page.read_text()
    page.write_text(page.read_text().replace("## Rewards", "## Rewardz"))
    done = _run("--check", "--out", str(tmp_path))
    assert done.returncode == 1 and "sql.md" in done.stderr and "math.md" not in done.stderr


class _Undocumented(ToolEnv):
    """An env whose docstring has only a description.

    ## Description
    Nothing else.
    """


class _Knobbed(ToolEnv):
    """A documented env with ``knobs``.

    ## Description
    d
    ## Rewards
    r
    ## Episode End
    e
    ## Information
    i
    ## Arguments
    a
    ## Version History
    * v0
    """

    def __init__(self, level: int = 3, mode: str = "a|b", **kwargs: object) -> None:
        pass


def test_render_reads_sections_and_defaults_from_the_code() -> None:
    gen = _gen()
    with pytest.raises(ValueError, match=r"lacks the sections.*Rewards"):
        gen.sections(_Undocumented)
    text = gen.render(gen.EnvPage("knobbed", _Knobbed, "prm/Knobbed-v0", 5, (("max_turns", 5),)))
    assert "A documented env with `knobs`." in text and "| max_episode_steps | 5 |" in text
    assert "| `level` | `3` |" in text and "| `mode` | `'a\\|b'` |" in text
    assert "| `tool_timeout_s` | `None` |" in text  # ToolEnv's pass-through knobs are listed too
