"""The env server (prm-serve) and RemoteEnv, for real: uvicorn on 127.0.0.1, ephemeral ports."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import prm_gym  # noqa: F401
from prm_gym.core.errors import InfraError
from prm_gym.envs.remote import RemoteEnv, RemoteEnvError, RemoteEnvUnavailable
from tests.envs.flaky_env import closed

pytest.importorskip("fastapi", reason="the env server needs the serve extra (fastapi, uvicorn)")

from prm_gym.envs.serve.app import serve_in_thread
from prm_gym.envs.serve.cli import parse_args
from prm_gym.envs.serve.sessions import EnvServer, ServerConfig
from prm_gym.envs.serve.wire import dumps, from_wire

pytestmark = pytest.mark.xdist_group("env_server")

MATH_KW = {"num_tasks": 12, "levels": [1, 2], "max_turns": 2}


@pytest.fixture(scope="module")
def math_url() -> Iterator[str]:
    with serve_in_thread(EnvServer(ServerConfig("prm/Math-v0", MATH_KW))) as url:
        yield url


@pytest.fixture
def close_log(tmp_path: Path) -> Path:
    return tmp_path / "closed.log"


@pytest.fixture
def flaky(close_log: Path) -> Iterator[tuple[EnvServer, str]]:
    kw = {"close_log": str(close_log)}
    server = EnvServer(ServerConfig("test/Flaky-v0", kw, idle_timeout_s=0.5, reap_every_s=0.1, call_timeout_s=3.0))
    with serve_in_thread(server) as url:
        yield server, url


def test_remote_env_passes_check_env_and_exposes_tools_and_tasks(math_url: str) -> None:
    env = RemoteEnv(math_url, env_id="prm/Math-v0")
    check_env(env, skip_render_check=True)
    local = gym.make("prm/Math-v0", **MATH_KW)
    assert env.tool_schemas == local.unwrapped.tool_schemas  # type: ignore[attr-defined]
    assert env.tasks.ids == local.unwrapped.tasks.ids  # type: ignore[attr-defined]
    assert env.tasks.get(env.tasks.ids[0]).meta == {"level": local.unwrapped.tasks[0].meta["level"]}  # type: ignore[attr-defined]
    assert env.tasks.get(env.tasks.ids[0]).answer is None  # gold answers stay on the server
    assert str(env.judge_spec) == str(local.unwrapped.judge_spec)  # type: ignore[attr-defined]
    local.close()
    env.close()
    env.close()  # idempotent
    assert httpx.get(math_url + "/health").json()["sessions"] == 0


def _script(env: gym.Env[str, str], seed: int) -> list[str]:
    """Actions for an episode: a calculator call, then the right answer on even seeds, a wrong one on odd."""
    answer = str(env.unwrapped.task.answer)  # type: ignore[attr-defined]
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    return [call, f"<answer>{answer if seed % 2 == 0 else answer + '1'}</answer>"]


def _play(env: gym.Env[str, str], seed: int, actions: list[str] | None = None) -> tuple[list[Any], list[str]]:
    obs, info = env.reset(seed=seed)
    if actions is None:
        actions = _script(env, seed)
    out: list[Any] = [obs, info["task_id"]]
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        info = {k: v for k, v in info.items() if k != "tool"}  # tool latency differs run to run
        out.append((obs, reward, terminated, truncated, info))
    return out, actions


def test_concurrent_sessions_give_the_rewards_of_local_envs(math_url: str) -> None:
    local = {}
    for seed in range(8):
        env = gym.make("prm/Math-v0", **MATH_KW)
        local[seed] = _play(env, seed)
        env.close()

    def remote(seed: int) -> list[Any]:
        env = RemoteEnv(math_url)
        try:
            return _play(env, seed, local[seed][1])[0]
        finally:
            env.close()

    with ThreadPoolExecutor(8) as pool:
        results = dict(zip(range(8), pool.map(remote, range(8)), strict=True))
    for seed in range(8):
        assert results[seed] == local[seed][0], seed
    rewards = [results[s][-1][1] for s in range(8)]
    assert rewards[0] > rewards[1]  # the right answer earned more than the wrong one: the check can fail


def test_a_slow_step_does_not_block_other_sessions(flaky: tuple[EnvServer, str]) -> None:
    _, url = flaky
    slow, fast = RemoteEnv(url), RemoteEnv(url)
    slow.reset(seed=0)
    fast.reset(seed=0)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(slow.step, "slow")
        time.sleep(0.2)
        start = time.monotonic()
        fast.step("<answer>0</answer>")
        fast_s = time.monotonic() - start
        assert not pending.done()
        assert pending.result()[4]["reward_status"] == "ok"
    assert fast_s < 1.0  # the slow step (1.5 s) was still running
    slow.close()
    fast.close()


def test_idle_sessions_are_reaped_and_their_envs_closed(flaky: tuple[EnvServer, str], close_log: Path) -> None:
    server, url = flaky
    before = closed(close_log)
    env = RemoteEnv(url)
    env.reset(seed=0)
    deadline = time.monotonic() + 10
    while (server.sessions or not server.closed_by_reaper) and time.monotonic() < deadline:
        time.sleep(0.05)  # the reaper counts its sweep after closing the sessions in it
    assert not server.sessions and server.closed_by_reaper == 1 and closed(close_log) == before + 1
    # mid-episode, the expired session is an infrastructure failure, not the agent's
    _, reward, terminated, truncated, info = env.step("<answer>0</answer>")
    assert info["reward_status"] == "infra_error" and reward == 0.0 and truncated and not terminated
    obs, info = env.reset(seed=1)  # a new session
    assert obs and env.step("<answer>0</answer>")[4]["reward_status"] == "ok"
    env.close()


def test_stopping_the_server_closes_every_session(close_log: Path) -> None:
    server = EnvServer(ServerConfig("test/Flaky-v0", {"close_log": str(close_log)}))
    before = closed(close_log)
    with serve_in_thread(server) as url:
        for _ in range(3):
            httpx.post(url + "/sessions", json={"env_kwargs": {"num_tasks": 2}}).raise_for_status()
        assert len(server.sessions) == 3
    assert not server.sessions and closed(close_log) == before + 3


def test_bad_requests_get_4xx_with_a_reason() -> None:
    server = EnvServer(ServerConfig("test/Flaky-v0"))  # no short idle timeout: each case may start a worker
    with serve_in_thread(server) as url:
        sid = httpx.post(url + "/sessions", json={}).json()["session_id"]
        step = f"{url}/sessions/{sid}/step"
        JSON = {"content-type": "application/json; charset=utf-8"}
        cases = [
            (httpx.post(url + "/sessions/nope/step", json={"action": "x"}), 404, "no session"),
            (httpx.post(step, json={"action": "x"}), 409, "reset"),
            (httpx.post(step, content=b"{not json", headers=JSON), 400, "not JSON"),
            (httpx.post(step, content=b'{"action": "\xff\xfe"}', headers=JSON), 400, "UTF-8"),
            (httpx.post(step, content=b'{"action": "x"}'), 415, "application/json"),  # no type: a web form
            (httpx.post(step, content=b'{"action": "x"}', headers={"content-type": "text/plain"}), 415, "text/plain"),
            (httpx.post(url + "/sessions", json={"env_kwargs": 0}), 422, "JSON object"),
            (httpx.post(step, json=["x"]), 422, "JSON object"),
            (httpx.post(step, json={"act": "x"}), 422, "'action'"),
            (httpx.post(step, json={"action": 3}), 422, "string"),
            (httpx.post(step, json={"action": "x" * (2 << 20)}), 413, "--max-body-bytes"),
            (httpx.post(f"{url}/sessions/{sid}/reset", json={"seed": -1}), 422, "seed"),
            (httpx.post(f"{url}/sessions/{sid}/reset", json={"options": {"task_id": "zz"}}), 400, "no task"),
            (httpx.post(url + "/sessions", json={"env_kwargs": {"tasks": "/etc/passwd"}}), 400, "--allow-kwargs"),
            (httpx.post(url + "/sessions", json={"env_kwargs": {"num_tasks": "many"}}), 400, "rejected"),
            (httpx.post(url + "/sessions", json={"env": "prm/Math-v0"}), 400, "serves 'test/Flaky-v0'"),
            (httpx.get(url + "/nowhere"), 404, "Not Found"),
        ]
        for response, status, reason in cases:
            assert response.status_code == status, (response.request.url, response.text)
            assert reason in response.json()["error"], response.json()
        # the session survived all of that
        assert httpx.post(f"{url}/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
        with pytest.raises(RemoteEnvError, match="allow-kwargs"):
            RemoteEnv(url, env_kwargs={"judge": "llm/turn"})
        with pytest.raises(RemoteEnvError, match="serves"):
            RemoteEnv(url, env_id="prm/Math-v0")
        env = RemoteEnv(url)
        with pytest.raises(gym.error.ResetNeeded):
            env.step("x")
        env.close()
        assert list(server.sessions) == [sid]


def test_an_env_that_raises_a_bug_gets_500_and_the_client_raises_as_locally(flaky: tuple[EnvServer, str]) -> None:
    """A bug in the env behind the server (not an InfraError) raises at the client, as the env raises
    when local (docs/contract.md, "Failures and verdicts"): it is never excluded as infra_error."""
    server, url = flaky
    sid = httpx.post(url + "/sessions", json={}).json()["session_id"]
    httpx.post(f"{url}/sessions/{sid}/reset", json={"seed": 0})
    r = httpx.post(f"{url}/sessions/{sid}/step", json={"action": "crash"})
    assert r.status_code == 500 and "RuntimeError: the env's backend exploded" in r.json()["error"]
    assert httpx.post(f"{url}/sessions/{sid}/step", json={"action": "x"}).status_code == 404  # closed
    env = RemoteEnv(url)
    env.reset(seed=0)
    with pytest.raises(RemoteEnvError, match="exploded") as raised:
        env.step("crash")
    assert raised.value.status == 500 and not isinstance(raised.value, InfraError)
    with pytest.raises(gym.error.ResetNeeded):
        env.step("x")
    env.reset(seed=0)  # a new session
    _, reward, *_, info = env.step("<answer>1</answer>")
    assert info["reward_status"] == "ok"
    # numpy scalars and non-finite floats in info cross the wire
    assert info["diag"] == {"f32": 0.5, "i64": 3, "inf": -math.inf, "nan": info["diag"]["nan"]}
    assert math.isnan(info["diag"]["nan"])
    env.close()
    assert not server.sessions


def test_an_unreachable_server_is_an_infra_error_within_the_deadline(flaky: tuple[EnvServer, str]) -> None:
    server, url = flaky
    env = RemoteEnv(url, timeout_s=0.5)
    env.reset(seed=0)
    with ThreadPoolExecutor(1) as pool:  # the step takes 1.5 s: longer than the deadline
        start = time.monotonic()
        out = pool.submit(env.step, "slow").result()
    assert out[4]["reward_status"] == "infra_error" and out[3]
    assert time.monotonic() - start < 1.2  # the deadline (0.5 s) held, cleanup included
    env.close()
    with pytest.raises(RemoteEnvUnavailable):
        RemoteEnv("http://127.0.0.1:9", timeout_s=0.3)


def test_session_limit_and_body_limit() -> None:
    from prm_gym.core.errors import ConfigError

    with pytest.raises(ConfigError, match="max-body-bytes"):
        EnvServer(ServerConfig("test/Flaky-v0", max_body_bytes=1000))
    with serve_in_thread(EnvServer(ServerConfig("test/Flaky-v0", max_sessions=1))) as url:
        env = RemoteEnv(url)
        r = httpx.post(url + "/sessions", json={})
        assert r.status_code == 503 and "--max-sessions" in r.json()["error"]
        with pytest.raises(RemoteEnvUnavailable, match="max-sessions"):
            RemoteEnv(url)
        env.reset(seed=0)
        # a lone surrogate crosses the wire and the env flags it, as a local env does
        assert env.step("<answer>\ud800</answer>")[4]["parse"]["issues"] == "invalid_unicode"
        assert env.step("<answer>\U0001f680</answer>")[4]["answer"] == "\U0001f680"
        env.close()


def test_fork_continues_from_the_turn_boundary(math_url: str) -> None:
    env = RemoteEnv(math_url)
    env.reset(seed=3)
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>'
    env.step(call)
    clone = env.fork()
    a = env.step("<answer>2</answer>")
    b = clone.step("<answer>2</answer>")
    assert a[:4] == b[:4] and a[4]["turn"] == b[4]["turn"] == 2
    env.close()
    clone.close()


def test_a_session_parses_the_tool_format_its_client_asks_for(math_url: str) -> None:
    """train-agent sends the policy's resolved --tool-format with each session; the default
    --allow-kwargs lets it through (it only picks the parser)."""
    env = RemoteEnv(math_url, env_id="prm/Math-v0", env_kwargs={"tool_format": "llama3"})
    env.reset(seed=3)
    obs, _, _, _, info = env.step('{"name": "calculator", "parameters": {"expression": "6*7"}}')
    assert info["tool"]["calls"] == 1 and info["parse"]["ok"] and "42" in obs
    env.close()


def test_wire_round_trips_odd_values() -> None:
    value = {"a": np.float64(1.5), "b": [np.int32(2), (3, math.inf)], "c": np.bool_(True), "d": object}
    back = from_wire(json.loads(dumps(value)))
    assert back == {"a": 1.5, "b": [2, [3, math.inf]], "c": True, "d": str(object)}
    assert json.loads(dumps({"s": "\ud800"}))["s"] == "\ud800"  # a lone surrogate survives


def test_cli_flags_build_the_config() -> None:
    cfg, host, port = parse_args(["--env", "prm/Math-v0", "--port", "0", "--env-kwargs", '{"levels": [1]}'])
    assert (cfg.env_id, cfg.env_kwargs, host, port) == ("prm/Math-v0", {"levels": [1]}, "127.0.0.1", 0)
    from prm_gym.core.errors import ConfigError

    with pytest.raises(ConfigError, match="not registered"):
        parse_args(["--env", "prm/Nope-v0"])
    with pytest.raises(ConfigError, match="JSON object"):
        parse_args(["--env", "prm/Math-v0", "--env-kwargs", "[1]"])


def test_train_agent_trains_and_evaluates_against_the_env_server(math_url: str, tmp_path: Path) -> None:
    from prm_gym.training.cli import main
    from prm_gym.training.metrics import read_metrics

    argv = ["--env-url", math_url, "--env-kwargs", '{"levels": [1], "num_tasks": 8}', "--steps", "1"]
    argv += [
        "--group-size",
        "2",
        "--tasks-per-step",
        "1",
        "--output-dir",
        str(tmp_path),
        "--no-progress",
        "--tools-prompt",
        "compact",
    ]
    argv += ["--no-tensorboard", "--sampling.max-new-tokens", "4", "--eval.num-tasks", "2", "--eval.samples", "2"]
    assert main(argv) == 0
    rows = read_metrics(tmp_path)
    assert any("reward" in r and r["step"] == 1 for r in rows)
    final = rows[-1]
    assert final["eval/tasks_scored"] == 2 and "eval/pass@2/level=1" in final
    assert httpx.get(math_url + "/health").json()["sessions"] == 0  # every session closed


@pytest.mark.slow
def test_tree_grpo_forks_sessions_on_the_env_server(math_url: str, tmp_path: Path) -> None:
    from prm_gym.training.cli import main

    argv = ["--env-url", math_url, "--env-kwargs", '{"levels": [1], "num_tasks": 8}', "--steps", "1"]
    argv += ["--algo", "tree-grpo", "--tree.num-trees", "1", "--tree.expand-nodes", "1", "--group-size", "2"]
    argv += ["--tasks-per-step", "1"]
    argv += ["--output-dir", str(tmp_path), "--no-progress", "--no-tensorboard", "--tools-prompt", "compact"]
    assert main([*argv, "--sampling.max-new-tokens", "4", "--eval.num-tasks", "1", "--eval.samples", "1"]) == 0
    assert httpx.get(math_url + "/health").json()["sessions"] == 0


def test_prm_serve_command_serves_until_terminated(tmp_path: Path) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "prm_gym.envs.serve.cli", "--env", "prm/Math-v0", "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--env-kwargs", '{"num_tasks": 5}'], stderr=subprocess.PIPE, text=True, env=os.environ
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                assert httpx.get(url + "/health").json()["env"] == "prm/Math-v0"
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr and proc.stderr.read()
                time.sleep(0.1)
        env = RemoteEnv(url)
        assert len(env.tasks) == 5 and env.reset(seed=0)[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully (the lifespan closes every session), then re-raises the signal
        assert proc.wait(20) in (0, -signal.SIGTERM)
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    bad = subprocess.run([*cmd, "--env-kwargs", "[1]"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "JSON object" in bad.stderr


def test_worker_threads_run_concurrent_calls_at_once_and_reuse_an_idle_thread() -> None:
    import threading

    from prm_gym.envs.serve.worker import _Threads

    pool, release, names = _Threads(), threading.Event(), []
    both = threading.Barrier(2, timeout=5)  # two calls in flight: each waits for the other
    done = threading.Semaphore(0)

    def blocking() -> None:
        both.wait()
        release.wait(5)
        done.release()

    pool.submit(blocking)
    pool.submit(blocking)
    release.set()
    assert done.acquire(timeout=5) and done.acquire(timeout=5)  # a broken barrier would raise in the thread

    def record() -> None:
        names.append(threading.get_ident())
        done.release()

    for _ in range(5):  # sequential calls: the idle threads are reused, none started
        pool.submit(record)
        assert done.acquire(timeout=5)
    before = threading.active_count()
    pool.submit(record)
    assert done.acquire(timeout=5) and threading.active_count() == before and len(set(names)) <= 2
