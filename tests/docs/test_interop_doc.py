"""docs/interop.md's code runs as written: the TRL block (with the tiny model for SmolLM2, one step)
trains, and the agent-loop block plays a real prm-serve server through RemoteEnv."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from prm_gym.core.parsing import format_answer

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, flags=re.DOTALL)


def test_the_trl_block_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = [b for b in BLOCKS if "GRPOTrainer" in b]
    assert '"hf:smollm2-135m"' in block and "max_steps=2" in block
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(os.environ, "TRL_EXPERIMENTAL_SILENCE", "1")
    code = block.replace('"hf:smollm2-135m"', '"hf:tiny"').replace("max_steps=2", "max_steps=1")
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/interop.md", "exec"), scope)
    logs = scope["trainer"].state.log_history[0]
    assert {"rewards/prm_outcome/mean", "rewards/prm_format/mean", "rewards/prm_tool/mean", "prm/turns"} <= set(logs)


def test_the_agent_loop_block_plays_a_real_env_server() -> None:
    pytest.importorskip("fastapi", reason="prm-serve needs the serve extra")
    from prm_gym.envs.serve.app import serve_in_thread
    from prm_gym.envs.serve.sessions import EnvServer, ServerConfig

    (block,) = [b for b in BLOCKS if "RemoteEnv" in b]
    calls: list[list[dict[str, Any]]] = []

    def generate(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        calls.append(list(messages))
        assert [t["function"]["name"] for t in tools] == ["calculator"]
        if len(calls) == 1:
            return '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
        return format_answer("42")

    with serve_in_thread(EnvServer(ServerConfig("prm/Math-v0"))) as url:
        scope: dict[str, Any] = {"URL": url, "generate": generate}
        exec(compile(block, "docs/interop.md", "exec"), scope)
    turns, solved = scope["turns"], scope["solved"]
    assert solved and len(turns) == 2 and all(t["status"] == "ok" for t in turns)
    assert "42" in calls[1][-1]["content"]  # the tool's result came back as the next observation
    assert set(turns[0]["terms"]) == {"reward_outcome", "reward_format", "reward_tool"}
    assert turns[0]["reward"] == pytest.approx(sum(turns[0]["terms"].values()))
