"""register_tool_env: plain functions become a Gymnasium env, and bad tools fail clearly."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.parsing import format_tool_call
from prm_gym.envs import ConfigError, TaskError, register_tool_env


def lookup(key: str) -> str:
    """Look a key up in the fictional registry.

    Args:
        key: the key to look up.
    """
    return {"zorb": "blue", "quill": "seven"}.get(key, "unknown")


async def slow_echo(text: str, delay: float = 0.0) -> str:
    """Echo text after a delay (async).

    Args:
        text: what to echo.
        delay: seconds to wait first.
    """
    await asyncio.sleep(delay)
    return text


def explode(x: int) -> str:
    """Always raises."""
    raise RuntimeError(f"boom {x}")


TASKS = [
    {"id": "z", "prompt": "What colour is zorb?", "answer": "blue"},
    {"id": "q", "prompt": "quill?", "answer": "seven"},
]


@pytest.fixture()
def env_id() -> str:
    register_tool_env(
        "test/Lookup-v0",
        tools=[lookup, slow_echo, explode],
        tasks=TASKS,
        max_turns=4,
        tool_timeout_s=0.5,
        overwrite=True,
    )
    return "test/Lookup-v0"


def test_make_check_env_and_solve(env_id: str) -> None:
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env.unwrapped)
    obs, info = env.reset(options={"task_id": "z"})
    assert [t["function"]["name"] for t in info["tools"]] == ["lookup", "slow_echo", "explode"]
    obs, *_ = env.step(format_tool_call("lookup", {"key": "zorb"}))
    assert obs == "<tool_response>\nblue\n</tool_response>"
    obs, reward, terminated, truncated, info = env.step("<answer>Blue</answer>")
    assert terminated and reward == 1.0 and info["reward_outcome"] == 1.0


def test_async_raising_and_hanging_tools_never_take_the_env_down(env_id: str) -> None:
    env = gym.make(env_id)
    env.reset(options={"task_id": "q"})
    obs, _, _, _, info = env.step(format_tool_call("slow_echo", {"text": "hi"}))
    assert "hi" in obs and info["tool"]["ok"]
    obs, _, _, _, info = env.step(format_tool_call("explode", {"x": 3}))
    assert "RuntimeError: boom 3" in obs and not info["tool"]["ok"] and info["reward_status"] == "ok"
    start = time.perf_counter()
    obs, _, _, _, info = env.step(format_tool_call("slow_echo", {"text": "late", "delay": 5.0}))
    assert time.perf_counter() - start < 2.0
    assert info["reward_status"] == "infra_error" and "0.5s" in obs


def test_tasks_from_file_and_callable(tmp_path: Path) -> None:
    f = tmp_path / "tasks.jsonl"
    f.write_text("\n".join(json.dumps({"question": f"q{i}", "golden_answers": [str(i)]}) for i in range(3)))
    register_tool_env("test/File-v0", tools=[lookup], tasks=str(f), overwrite=True)
    env = gym.make("test/File-v0")
    _, info = env.reset(seed=0)
    assert info["task_id"].startswith("line-")
    register_tool_env(
        "test/Gen-v0", tools=[lookup], tasks=lambda: [{"id": "g", "prompt": "p", "answer": "a"}], overwrite=True
    )
    assert gym.make("test/Gen-v0").reset()[1]["task_id"] == "g"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answer": "x"}\n')
    register_tool_env("test/Bad-v0", tools=[lookup], tasks=str(bad), overwrite=True)
    with pytest.raises(TaskError, match=r"bad\.jsonl:1"):
        gym.make("test/Bad-v0")


def test_registration_errors() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    def unjsonable(x: bytes) -> str:
        return ""

    register_tool_env("test/Taken-v0", tools=[lookup], tasks=TASKS, overwrite=True)
    with pytest.raises(ConfigError, match="already registered"):
        register_tool_env("test/Taken-v0", tools=[lookup], tasks=TASKS)
    with pytest.raises(ConfigError, match="no type hint"):
        register_tool_env("test/U-v0", tools=[untyped], tasks=TASKS)
    with pytest.raises(ConfigError, match="cannot be expressed"):
        register_tool_env("test/J-v0", tools=[unjsonable], tasks=TASKS)
    with pytest.raises(ConfigError, match="share a name"):
        register_tool_env("test/D-v0", tools=[lookup, lookup], tasks=TASKS)
    with pytest.raises(ConfigError, match="judge expression"):
        register_tool_env("test/E-v0", tools=[lookup], tasks=TASKS, judge="nonsense")


def test_vector_env_over_prm_ids() -> None:
    vec = gym.make_vec("prm/Math-v0", num_envs=3, vectorization_mode="sync")
    obs, info = vec.reset(seed=0)
    assert isinstance(obs, tuple) and len(obs) == 3 and all(isinstance(o, str) for o in obs)
    obs, reward, terminated, truncated, info = vec.step(("<answer>1</answer>", "hmm", "<answer>2</answer>"))
    assert list(terminated) == [True, False, True] and reward[1] == pytest.approx(-0.1)
    assert list(info["reward_status"]) == ["ok", "ok", "ok"]
    vec.close()


def test_worked_example_package() -> None:
    weather_agent = pytest.importorskip("weather_agent", reason="examples/weather_agent is installed by `make setup`")
    from weather_agent.tools import forecast_high_c

    env = gym.make("weather/Forecast-v0")
    _, info = env.reset(seed=0)
    task = env.unwrapped.task
    city, day = task.meta["city"], task.meta["day"]
    obs, *_ = env.step(format_tool_call("get_forecast", {"city": city, "day": day}))
    assert f"high {forecast_high_c(city, day)} C" in obs
    _, reward, terminated, _, info = env.step(f"<answer>{task.answer}</answer>")
    assert terminated and info["judge"]["weather/close"]["score"] == 1.0 and reward == 1.0
    assert weather_agent.__name__ == "weather_agent"


def test_the_quickstart_on_the_custom_env_page_runs_as_written(tmp_path: Path) -> None:
    """docs/envs/custom.md opens with examples/quickstart/convert_tools.py and two commands; both run."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    example = root / "examples" / "quickstart" / "convert_tools.py"
    assert example.read_text().rstrip() in (root / "docs" / "envs" / "custom.md").read_text()
    played = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=120)
    assert played.returncode == 0, played.stderr[-2000:]
    assert "reward +1.00" in played.stdout and "[ok]" in played.stdout
    env = {**os.environ, "PYTHONPATH": str(example.parent), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "prm_gym.training.cli", "--imports", "convert_tools", "--env", "mylab/Convert-v0"]
    cmd += [
        "--steps",
        "1",
        "--group-size",
        "2",
        "--tasks-per-step",
        "1",
        "--output-dir",
        str(tmp_path),
        "--no-progress",
    ]
    cmd += ["--no-tensorboard", "--sampling.max-new-tokens", "4", "--eval.num-tasks", "1", "--eval.samples", "1"]
    trained = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "trained 1 steps" in trained.stdout and (tmp_path / "metrics.jsonl").exists()
