"""docs/training.md's flag table is exactly what docs/gen_training_flags.py renders from the config."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

from prm_gym.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "gen_training_flags.py"


def leaf_fields(cls: type, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        value = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(value):
            out += leaf_fields(type(value), f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def test_the_table_is_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_every_config_field_has_a_documented_row() -> None:
    spec = importlib.util.spec_from_file_location("gen_training_flags", SCRIPT)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    table = (ROOT / "docs" / "training.md").read_text()
    for name in leaf_fields(TrainConfig):
        flag = "--" + name.replace("_", "-")
        assert f"`{flag}`" in table, flag
    assert all(meaning for _, _, meaning in gen.rows(TrainConfig)), "a config field has no docstring"
