"""Every package imports on its own in a fresh interpreter (no import cycles), and the config
module stays free of torch so `train-agent --help` is fast."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "rewards",
        "prm_gym.rewards.combine",
        "prm_gym.rewards.llm_judge",
        "prm_gym.envs.base",
        "prm_gym.envs.custom",
        "sandbox",
        "agents",
    ],
)
def test_fresh_import(module: str) -> None:
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_training_config_does_not_import_torch() -> None:
    code = "import sys, prm_gym.training.config; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"
