"""The README's commands and snippets run as written (a new-user audit found three that did not)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import gymnasium as gym
import pytest

from prm_gym.training.cli import parse

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _python_blocks() -> list[str]:
    section = README[README.index("## Three ways to use it") :]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.parametrize("line", re.findall(r"^train-agent .*$", README, re.M))
def test_every_train_agent_command_in_the_readme_is_a_valid_configuration(line: str) -> None:
    parse(shlex.split(line.split("  #")[0])[1:])  # raises SystemExit or ConfigError on a bad one


def test_the_own_loop_snippet_scores_its_right_answer() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(_python_blocks()[0], {})
    assert out.getvalue().startswith("1.0 1.0 {'rule/math_equiv': {'score': 1.0}")


def test_the_own_tools_snippet_registers_an_env_that_plays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = next(b for b in _python_blocks() if "register_tool_env(" in b)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tasks.jsonl").write_text('{"id": "t1", "prompt": "Weather in Paris?", "answer": "sunny"}\n')
    namespace: dict[str, object] = {}
    try:
        exec(snippet, namespace)
        env = namespace["env"]
        assert isinstance(env, gym.Env)
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step("<answer>sunny</answer>")
        assert terminated and info["reward_outcome"] == 1.0
        env.close()
    finally:
        gym.registry.pop("mylab/Weather-v0", None)
