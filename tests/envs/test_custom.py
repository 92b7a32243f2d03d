"""register_tool_env: plain functions become a Gymnasium env, and bad tools fail clearly."""

from __future__ import annotations

import asyncio
import json
import threading
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
    # a deadline miss is the agent's failed call: it chose the delay, and infra_error would hide the
    # failure from its group; the async tool is cancelled, so no thread is left running
    start = time.perf_counter()
    obs, _, _, _, info = env.step(format_tool_call("slow_echo", {"text": "late", "delay": 5.0}))
    assert time.perf_counter() - start < 2.0
    assert info["reward_status"] == "ok" and not info["tool"]["ok"] and "no result within 0.5s" in obs
    assert not [t for t in threading.enumerate() if t.name == "tool-slow_echo"]


def test_a_plain_tool_past_its_deadline_is_the_agents_failed_call_and_is_counted() -> None:
    from prm_gym.envs.tool_calls import abandoned_calls

    release = threading.Event()

    def hang(seconds: float) -> str:
        """Wait (a plain function: no thread deadline can stop it).

        Args:
            seconds: how long.
        """
        release.wait(seconds)
        return "done"

    register_tool_env("test/Hang-v0", tools=[hang], tasks=TASKS, tool_timeout_s=0.3, overwrite=True)
    env = gym.make("test/Hang-v0")
    env.reset(options={"task_id": "z"})
    before = abandoned_calls()
    obs, reward, _, _, info = env.step(format_tool_call("hang", {"seconds": 60}))
    assert info["reward_status"] == "ok" and not info["tool"]["ok"] and "no result within 0.3s" in obs
    assert abandoned_calls() == before + 1
    release.set()  # the abandoned call returns; its result goes nowhere
    deadline = time.monotonic() + 5
    while abandoned_calls() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert abandoned_calls() == before


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


def _page_commands(page: str) -> list[str]:
    """The lines of the first ``bash`` block after the example on docs/envs/custom.md."""
    block = page.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_quickstart_on_the_custom_env_page_runs_as_written_from_an_empty_folder(tmp_path: Path) -> None:
    """docs/envs/custom.md shows examples/quickstart/convert_tools.py and the commands that run it; saved
    in an empty folder, with prm-gym installed and no repository checkout around, each command runs
    as written (the console scripts find the module in the current folder)."""
    import os
    import shlex
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    example = root / "examples" / "quickstart" / "convert_tools.py"
    page = (root / "docs" / "envs" / "custom.md").read_text()
    assert example.read_text().rstrip() in page
    commands = _page_commands(page)
    assert [c.split()[0] for c in commands] == ["python", "prm-play", "train-agent"]
    folder = tmp_path / "empty"
    folder.mkdir()
    shutil.copy(example, folder / "convert_tools.py")
    bin_dir = Path(sys.executable).parent
    # prm_gym from this checkout, as an installed package would be: on sys.path, the folder itself not
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    fast = ["--no-progress", "--no-tensorboard", "--group-size", "2", "--tasks-per-step", "1"]
    fast += ["--sampling.max-new-tokens", "4", "--output-dir", str(tmp_path / "run")]
    out = {}
    for command in commands:
        argv = shlex.split(command)
        if argv[0] == "python":
            argv[0] = sys.executable
        elif not (bin_dir / argv[0]).exists():
            pytest.skip(f"{argv[0]} is not installed in {bin_dir} (pip install -e .)")
        if argv[0] == "train-agent":
            argv += fast
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=folder)
        assert proc.returncode == 0, f"{command}: {proc.stderr[-2000:]}"
        out[argv[0].rsplit("/", 1)[-1]] = proc
    assert "reward +1.00" in out[Path(sys.executable).name].stdout
    assert "gold: 39/39 tasks reach outcome 1.0" in out["prm-play"].stdout
    trained = out["train-agent"]
    assert "trained 2 steps" in trained.stdout and (tmp_path / "run" / "metrics.jsonl").exists()
    assert "held-out (8 tasks scored)" in trained.stdout  # 8 of the example's test split, sized to 2 steps
    assert "HeldOutOverlapWarning" not in trained.stderr


def test_a_task_list_serving_training_and_eval_warns(tmp_path: Path) -> None:
    """One task list for training and held-out eval: the run warns (eval/* would measure recall)."""
    from prm_gym.training.config import EvalConfig, SamplingConfig, TrainConfig
    from prm_gym.training.heldout import HeldOutOverlapWarning
    from prm_gym.training.run import build_run

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"id": "t{i}", "prompt": "{i} + 1?", "answer": "{i + 1}"}}\n' for i in range(6)))
    base = dict(tasks=str(tasks), steps=1, output_dir=str(tmp_path / "run"), progress=False)
    base.update(sampling=SamplingConfig(max_new_tokens=4), policy="hf:tiny")
    with pytest.warns(HeldOutOverlapWarning, match="6 of the 6 held-out eval tasks are also training tasks"):
        build_run(TrainConfig(**base))  # type: ignore[arg-type]
    other = tmp_path / "heldout.jsonl"
    other.write_text('{"id": "h0", "prompt": "40 + 2?", "answer": "42"}\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error", HeldOutOverlapWarning)
        build_run(TrainConfig(**base, eval=EvalConfig(tasks=str(other))))  # type: ignore[arg-type]


def test_an_llm_judge_marks_the_registration_nondeterministic_unless_told() -> None:
    """Gymnasium's ``nondeterministic`` flag (check_env and users read it) follows the judge: an
    ``llm/`` judge samples, a rule judge does not; an explicit value wins."""
    register_tool_env("test/Rule-v0", tools=[lookup], tasks=TASKS, overwrite=True)
    register_tool_env("test/Llm-v0", tools=[lookup], tasks=TASKS, judge="rule/exact_match + llm/turn", overwrite=True)
    register_tool_env(
        "test/Told-v0", tools=[lookup], tasks=TASKS, judge="llm/turn", nondeterministic=False, overwrite=True
    )
    assert (gym.spec("test/Rule-v0").nondeterministic, gym.spec("test/Llm-v0").nondeterministic) == (False, True)
    assert gym.spec("test/Told-v0").nondeterministic is False


def test_a_turns_calls_stop_running_once_they_spent_its_budget() -> None:
    """Eight slow calls in one turn would outlast a server's deadline for one step (prm-serve answers
    504, RemoteEnv: infra_error, the agent's slowness turned into infrastructure); past turn_budget_s
    the turn's remaining calls are the agent's failed calls, not run."""
    ran: list[float] = []

    def nap(seconds: float) -> str:
        """Sleep a while.

        Args:
            seconds: how long.
        """
        ran.append(seconds)
        time.sleep(seconds)
        return "rested"

    register_tool_env("test/Nap-v0", tools=[nap], tasks=TASKS, tool_timeout_s=5.0, overwrite=True)
    env = gym.make("test/Nap-v0", turn_budget_s=0.5)
    env.reset(options={"task_id": "z"})
    start = time.perf_counter()
    obs, _, _, _, info = env.step(format_tool_call("nap", {"seconds": 0.3}) * 4)
    assert time.perf_counter() - start < 1.5 and len(ran) == 2  # the third call began past the budget
    assert info["reward_status"] == "ok" and info["tool"]["calls"] == 4 and info["tool"]["failed"] == 2
    assert obs.count("rested") == 2 and obs.count("used its 0.5s budget") == 2
    with pytest.raises(ConfigError, match="turn_budget_s"):
        gym.make("test/Nap-v0", turn_budget_s=0)
