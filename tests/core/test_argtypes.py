"""The shared argparse types: bad numbers are usage errors (exit 2) in every command that takes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from prm_gym.envs.serve.cli import main as serve_main
from prm_gym.training.cli import main as train_main


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_prm_serve_refuses_a_port_out_of_range(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:  # --port 99999 was an OverflowError from bind()
        serve_main(["--port", port])
    assert exc.value.code == 2 and "--port" in capsys.readouterr().err


def test_train_agent_says_when_the_output_dir_cannot_be_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert train_main(["--output-dir", str(blocker / "run"), "--steps", "1", "--no-progress"]) == 2
    assert capsys.readouterr().err.startswith(f"train-agent: error: --output-dir '{blocker / 'run'}'")
