"""``train-agent --tasks`` / ``--eval.tasks``: a standard dataset (or any task file) in place of the
env's generator, for training and held-out evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prm_gym.training.cli import main
from prm_gym.training.config import EvalConfig, TrainConfig

GSM8K = [
    {"question": "What is 2 + 6?", "answer": "2 + 6 = 8\n#### 8"},
    {"question": "What is 3 * 3?", "answer": "3 * 3 = 9\n#### 9"},
    {"question": "What is 10 - 7?", "answer": "10 - 7 = 3\n#### 3"},
]


def test_tasks_flags_become_the_envs_tasks_argument() -> None:
    cfg = TrainConfig(tasks="dataset:gsm8k:/data/train.parquet", env_kwargs='{"tasks": "ignored", "levels": [1]}')
    assert cfg.env_kwargs_dict == {"tasks": "dataset:gsm8k:/data/train.parquet", "levels": [1]}
    assert cfg.eval_env_kwargs["tasks"] == "dataset:gsm8k:/data/train.parquet"  # default: the same source
    assert cfg.eval_env_kwargs["split"] == "test"  # ... read with the eval split (a folder's test split)
    held_out = TrainConfig(tasks="a.jsonl", eval=EvalConfig(tasks="b.jsonl"))
    assert held_out.env_kwargs_dict["tasks"] == "a.jsonl" and held_out.eval_env_kwargs["tasks"] == "b.jsonl"


def test_train_agent_evaluates_a_dataset_named_with_tasks(tmp_path: Path) -> None:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in GSM8K))
    argv = ["--mode", "eval", "--tasks", f"dataset:gsm8k:{data}", "--env-kwargs", '{"max_turns": 1}']
    argv += ["--output-dir", str(tmp_path / "run"), "--eval.num-tasks", "3", "--eval.samples", "1"]
    assert main([*argv, "--sampling.max-new-tokens", "4", "--tools-prompt", "compact", "--no-progress"]) == 0
    result = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert result["tasks_scored"] == 3.0 and result["success"] == 0.0  # the untrained tiny model answers nothing


def test_train_agent_refuses_a_dataset_of_another_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in GSM8K))
    argv = ["--env", "prm/SQL-v0", "--tasks", f"dataset:gsm8k:{data}", "--mode", "eval"]
    assert main([*argv, "--output-dir", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "gsm8k tasks are played in prm/Math-v0, not prm/SQL-v0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [('{"levles": [1]}', "unexpected keyword argument 'levles'"), ('{"max_turns": "3"}', "not supported between")],
)
def test_env_kwargs_the_env_rejects_are_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kwargs: str, said: str
) -> None:
    """They were a traceback and exit 1 (TypeError out of gym.make); now the usage error, exit 2."""
    argv = ["--env-kwargs", kwargs, "--steps", "1", "--output-dir", str(tmp_path / "run"), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("train-agent: error: prm/Math-v0 with keyword arguments") and said in err
