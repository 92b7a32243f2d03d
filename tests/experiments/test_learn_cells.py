"""experiments.learn_cells reads a run's per-task records (an arm found in a second folder) into the tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import learn_cells


def _records(folder: Path, model: str, wins: list[int]) -> None:
    rows = [{"task_id": f"t{i}", "template": f"h{i % 4}", "strict": bool(w)} for i, w in enumerate(wins)]
    (folder / f"{model}-templates-greedy.json").write_text(json.dumps(rows))


def test_pairs_read_b_minus_a_from_the_first_folder_holding_each_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, earlier = tmp_path / "run", tmp_path / "earlier"
    run.mkdir()
    earlier.mkdir()
    _records(run, "grpo", [1, 1, 1, 1, 0, 0, 0, 0])
    _records(run, "sft_cont", [1, 1, 0, 0, 0, 0, 0, 0])
    _records(earlier, "sft", [0] * 8)
    _records(earlier, "grpo", [0] * 8)  # shadowed by run's
    assert learn_cells.main([str(run), str(earlier)]) == 0
    out = capsys.readouterr().out
    assert "| grpo | templates | greedy | 50.0% ± " in out and "4 of 4 |" in out
    assert "| grpo − sft_cont | templates | greedy | +25.0% | 2 / 0 |" in out
    assert "| grpo − sft | templates | greedy | +50.0% | 4 / 0 |" in out
    with pytest.raises(SystemExit):
        learn_cells.main([str(tmp_path / "missing")])
