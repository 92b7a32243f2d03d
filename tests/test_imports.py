"""Every package imports on its own in a fresh interpreter (no import cycles), and the config
module stays free of torch so `train-agent --help` is fast."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "prm_gym.rewards",
        "prm_gym.rewards.combine",
        "prm_gym.rewards.llm_judge",
        "prm_gym.envs.base",
        "prm_gym.envs.custom",
        "prm_gym.sandbox",
        "prm_gym.agents",
    ],
)
def test_fresh_import(module: str) -> None:
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("name", ["envs", "agents", "rewards", "sandbox", "training", "core"])
def test_no_second_copy_of_a_subpackage_at_the_repository_root(name: str) -> None:
    """The subpackages live only under prm_gym/: from the repository root, ``import envs`` finds nothing
    (a second copy would split registries and ``isinstance``)."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", f"import {name}"], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and "No module named" in proc.stderr
    assert not any(p.is_symlink() for p in (root / "prm_gym").iterdir())


def test_training_config_does_not_import_torch() -> None:
    code = "import sys, prm_gym.training.config; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"
