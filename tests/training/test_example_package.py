"""The worked example package is installed and trains through train-agent (issue: own tools)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prm_gym.training.cli import main


def test_train_agent_on_the_example_package(tmp_path: Path) -> None:
    pytest.importorskip("weather_agent", reason="examples/weather_agent is installed by `make setup`")
    out = tmp_path / "run"
    argv = [
        "--imports",
        "weather_agent",
        "--env",
        "weather/Forecast-v0",
        "--steps",
        "1",
        "--group-size",
        "2",
        "--tasks-per-step",
        "1",
        "--output-dir",
        str(out),
        "--no-progress",
        "--sampling.max-new-tokens",
        "12",
        "--eval.num-tasks",
        "2",
        "--eval.samples",
        "1",
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "generated_tokens" in r]
    assert train_rows and train_rows[0]["generated_tokens"] > 0
    assert any("eval/reward" in r for r in rows)
    assert (out / "checkpoint.pt").exists()


def test_unknown_import_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--imports", "no_such_module_xyz"]) == 2
    assert "no_such_module_xyz" in capsys.readouterr().err
