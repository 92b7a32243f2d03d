"""The prm-play command as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

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
    for bad in (["--temperature", "warm"], ["--temperature", "-1"], ["--episodes", "-1"], ["--episodes", "0"]):
        # --episodes -1 played 999 of 1000 gold tasks; --temperature -1 was a traceback
        with pytest.raises(SystemExit) as exc:
            main(["--policy", "gold", *bad])
        assert exc.value.code == 2
    assert main(["--policy", "gold", "--env-kwargs", '{"levles": [1]}']) == 2  # a traceback before
    assert "unexpected keyword argument 'levles'" in capsys.readouterr().err


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_gold_policy_checks_a_math_task_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--policy gold submits each task's gold answer: a task whose gold the env cannot reward fails,
    named, and the exit status is 1."""
    tasks = _jsonl(
        tmp_path / "tasks.jsonl",
        [
            {"id": "add", "prompt": "What is 2 + 3?", "answer": "5"},
            {"id": "broken", "prompt": "?", "answer": "</answer>"},
        ],
    )
    assert main(["--env", "prm/Math-v0", "--tasks", str(tasks), "--policy", "gold"]) == 1
    out = capsys.readouterr().out
    assert "ok    add  outcome 1.000" in out and "FAIL  broken  outcome 0.000" in out
    assert "gold: 1/2 tasks reach outcome 1.0" in out
    assert main(["--env", "prm/Math-v0", "--tasks", str(tasks), "--policy", "gold", "--episodes", "1"]) == 0


def test_gold_policy_runs_a_code_task_files_reference_solutions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On prm/Code-v0 the gold answer is the reference solution, run against the task's tests in the sandbox."""
    rows = [
        {
            "task_id": 1,
            "text": "Add two numbers.",
            "code": "def add(a, b):\n    return a + b\n",
            "test_list": ["assert add(1, 2) == 3"],
        },
        {
            "task_id": 2,
            "text": "Add two numbers.",
            "code": "def plus(a, b):\n    return a - b\n",
            "test_list": ["assert plus(1, 2) == 3"],
        },
    ]
    tasks = _jsonl(tmp_path / "mbpp.jsonl", rows)
    assert main(["--env", "prm/Code-v0", "--tasks", f"dataset:mbpp:{tasks}", "--policy", "gold"]) == 1
    out = capsys.readouterr().out
    assert "ok    1  outcome 1.000" in out and "FAIL  2  outcome 0.000" in out


def test_play_takes_env_kwargs_tool_format_and_imports(capsys: pytest.CaptureFixture[str]) -> None:
    """--env-kwargs and --tool-format reach gym.make; --import still works but says it is deprecated."""
    argv = ["--policy", "gold", "--env-kwargs", '{"levels": [1], "num_tasks": 3}', "--tool-format", "llama3"]
    assert main([*argv, "--import", "json"]) == 0
    captured = capsys.readouterr()
    assert "gold: 3/3 tasks" in captured.out
    assert "--import is deprecated; use --imports json" in captured.err
    assert main([*argv, "--imports", "no_such_module_xyz"]) == 2
    assert "--imports no_such_module_xyz" in capsys.readouterr().err
    assert main([*argv, "--env-kwargs", "[1]"]) == 2
    assert "--env-kwargs must be a JSON object" in capsys.readouterr().err


def test_the_env_flags_reach_gym_make() -> None:
    from prm_gym.agents.cli_env import make_policy_and_env
    from prm_gym.agents.play import _parser

    args = _parser().parse_args(["--policy", "gold", "--env-kwargs", '{"num_tasks": 2}', "--tool-format", "llama3"])
    _, chat, env = make_policy_and_env(args)
    try:
        assert env.unwrapped.tool_format == "llama3" == chat.tool_format and len(env.unwrapped.tasks) == 2
    finally:
        env.close()


def test_export_writes_gold_demonstrations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prm_gym.agents.export import main as export

    tasks = _jsonl(tmp_path / "tasks.jsonl", [{"id": "add", "prompt": "What is 2 + 3?", "answer": "5"}])
    out = tmp_path / "gold.jsonl"
    assert (
        export(["--tasks", str(tasks), "--policy", "gold", "--episodes", "2", "--output", str(out), "--no-progress"])
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["messages"][-1]["content"] for r in rows] == ["<answer>5</answer>"] * 2
    assert all(r["total_reward"] == 1.0 for r in rows)
