"""The prm-play command as a user runs it."""

from __future__ import annotations

import pytest

from prm_gym.agents.play import main


def test_play_prints_turns_with_reward_terms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--policy", "hf:tiny", "--max-new-tokens", "8", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "=== episode 1: prm/Math-v0 task math-train-0-" in out
    assert "--- turn 1 ---" in out and "reward " in out and "outcome" in out and "format" in out
    assert "turns: return" in out


def test_play_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--env", "prm/Nope-v0", "--policy", "hf:tiny"]) == 2
    assert "Nope" in capsys.readouterr().err
    assert main(["--policy", "hf:/missing/dir"]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["--policy", "hf:tiny", "--judge", "rule/f1 +"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["--temperature", "warm"])
    assert exc.value.code == 2
