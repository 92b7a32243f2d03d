"""A policy for any OpenAI-compatible chat server (issue #33, item 2), against a real HTTP server
on 127.0.0.1: tools go as tools=, tool_calls come back as the env's actions, deadlines and retries."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.export import main as export_main
from prm_gym.agents.openai_policy import OpenAIPolicy, parse_policy_id, render_action
from prm_gym.agents.play import main as play_main
from prm_gym.agents.rollout import run_episode
from prm_gym.agents.vllm import PolicyServerError
from prm_gym.core.errors import ConfigError
from prm_gym.core.policy import ChatPolicy, SamplingParams
from prm_gym.rewards.openai_fake import FakeOpenAIServer
from prm_gym.training.cli import main as train_main
from prm_gym.training.config import TrainConfig

MATH = {"levels": [1], "num_tasks": 4}
PARAMS = SamplingParams(max_new_tokens=64, temperature=0.0)


def solver(messages: list[dict[str, Any]]) -> str | dict[str, Any]:
    """A scripted model: asks the calculator for the task's expression, then answers with its result."""
    last = messages[-1]
    if last["role"] == "tool":
        return f"The result is in. <answer>{last['content'].strip()}</answer>"
    expression = re.search(r"What is (.+?)\?", last["content"])
    assert expression is not None, last
    args = json.dumps({"expression": expression.group(1)})
    call = {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": args}}
    return {"content": None, "tool_calls": [call]}


def policy_for(server: FakeOpenAIServer, **kw: Any) -> OpenAIPolicy:
    return OpenAIPolicy("served-model", server.base_url, **kw)


def test_policy_ids_name_model_and_base_url() -> None:
    assert parse_policy_id("openai:Qwen/Qwen2.5-7B-Instruct@http://localhost:8000/v1/") == (
        "Qwen/Qwen2.5-7B-Instruct",
        "http://localhost:8000/v1",
    )
    assert parse_policy_id("openai:qwen2.5:0.5b", {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}) == (
        "qwen2.5:0.5b",
        "http://127.0.0.1:11434/v1",
    )
    assert parse_policy_id("openai:gpt-4o-mini", {}) == ("gpt-4o-mini", "https://api.openai.com/v1")
    with pytest.raises(ConfigError, match="give a model"):
        parse_policy_id("openai:@http://localhost:8000/v1")


def test_tool_calls_become_the_envs_actions_and_results_go_back_as_tool_messages() -> None:
    env = gym.make("prm/Math-v0", **MATH)
    with FakeOpenAIServer(reply=solver) as server:
        policy = OpenAIPolicy.from_id(f"openai:served-model@{server.base_url}", {"OPENAI_API_KEY": "sk-test"})
        assert isinstance(policy, ChatPolicy)
        chat = ChatTemplate(policy.tokenizer)
        traj = run_episode(env, policy, chat, seed=0, sampling=PARAMS)
    env.close()
    first, second = server.requests
    assert first["model"] == "served-model" and first["tools"][0]["function"]["name"] == "calculator"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert server.headers[0]["authorization"] == "Bearer sk-test"
    # the env ran the structured call, rendered as the hermes text it parses
    assert traj.turns[0].action.startswith('<tool_call>{"name": "calculator"')
    assert traj.turns[0].info["tool"]["calls"] == 1 and traj.turns[0].info["tool"]["failed"] == 0
    # its result went back as the call's tool message, after the assistant message with the call
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": tool["content"]}
    assert "<tool_response>" not in tool["content"] and tool["content"].strip()
    # the <answer> in the content passed through and was scored right
    assert traj.terminated and traj.turns[1].action.endswith("</answer>")
    assert traj.turns[-1].terms["outcome"] == pytest.approx(1.0)
    assert traj.token_ids == [] and policy.usage.requests == 2


def test_other_tool_formats_and_malformed_arguments() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'}}
    text = render_action({"content": "thinking", "tool_calls": [call]}, "llama3")
    assert text.startswith("thinking\n") and '"parameters": {"expression": "1+1"}' in text
    bad = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": "{oops"}}
    env = gym.make("prm/Math-v0", **MATH)
    env.reset(seed=0)
    _, _, _, _, info = env.step(render_action({"tool_calls": [bad]}, "hermes"))
    env.close()
    assert info["parse"]["ok"] is False  # the agent's malformed call, scored as such


def test_a_server_that_fails_then_answers_is_retried_with_backoff() -> None:
    env = gym.make("prm/Math-v0", **MATH)
    with FakeOpenAIServer(reply=solver) as server:
        server.fail_next(1, status=500)
        server.fail_next(1, status=429)
        server.fail_next(1, status=0)  # a dropped connection
        policy = policy_for(server, backoff_s=0.05)
        t0 = time.monotonic()
        traj = run_episode(env, policy, ChatTemplate(policy.tokenizer), seed=0, sampling=PARAMS)
        took = time.monotonic() - t0
    env.close()
    assert traj.terminated and traj.turns[-1].terms["outcome"] == pytest.approx(1.0)
    assert policy.usage.retries == 3 and policy.usage.requests == 5
    assert took >= 0.05 + 0.1 + 0.2  # backoff doubled each retry


def test_a_server_that_keeps_failing_raises_after_bounded_retries() -> None:
    with FakeOpenAIServer(reply=solver) as server:
        server.fail_next(3, status=503)
        policy = policy_for(server, max_retries=2, backoff_s=0.01)
        with pytest.raises(PolicyServerError, match="failed after 3 attempts: HTTP 503"):
            policy.chat([[{"role": "user", "content": "What is 1 + 1?"}]], [[]], PARAMS)
        server.fail_next(1, status=400, body='{"error": {"message": "bad request"}}')
        with pytest.raises(PolicyServerError, match="HTTP 400"):  # not worth retrying
            policy.chat([[{"role": "user", "content": "What is 1 + 1?"}]], [[]], PARAMS)
    assert len(server.requests) == 3 + 1


def test_a_hanging_server_costs_one_total_deadline() -> None:
    with FakeOpenAIServer(reply=solver, delay_s=10.0) as server:
        policy = policy_for(server, timeout_s=0.5, max_retries=5, backoff_s=0.0)
        t0 = time.monotonic()
        with pytest.raises(PolicyServerError, match=r"within the 0.5s deadline"):
            policy.chat([[{"role": "user", "content": "What is 1 + 1?"}]], [[]], PARAMS)
        assert time.monotonic() - t0 < 2.0


def test_a_server_that_is_not_there_is_retried_then_reported() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = OpenAIPolicy("m", f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_s=0.01)
    with pytest.raises(PolicyServerError, match="failed after 3 attempts: ConnectError"):
        policy.chat([[{"role": "user", "content": "hi"}]], [[]], PARAMS)


def test_it_cannot_train_and_says_why() -> None:
    with pytest.raises(ConfigError, match="token ids"):
        TrainConfig(policy="openai:m@http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="log-probs"):
        OpenAIPolicy("m", "http://127.0.0.1:1/v1").generate([[1, 2]], PARAMS)


def test_prm_play_prm_export_and_eval_take_an_openai_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kwargs = json.dumps(MATH)
    with FakeOpenAIServer(reply=solver) as server:
        policy = f"openai:served-model@{server.base_url}"
        assert play_main(["--env", "prm/Math-v0", "--policy", policy]) == 0
        printed = capsys.readouterr().out
        assert '<tool_call>{"name": "calculator"' in printed and "terminated after 2 turns" in printed
        out = tmp_path / "episodes.jsonl"
        assert export_main(["--policy", policy, "--episodes", "2", "--output", str(out), "--no-progress"]) == 0
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == 2 and all(r["num_turns"] == 2 for r in rows)
        code = train_main(
            [
                "--mode", "eval", "--policy", policy, "--env-kwargs", kwargs, "--output-dir", str(tmp_path / "ev"),
                "--eval.num-tasks", "2", "--eval.samples", "2", "--no-progress",
            ]
        )  # fmt: skip
        assert code == 0
        result = json.loads((tmp_path / "ev" / "eval.json").read_text())
        assert result["policy"] == policy and result["success"] == 1.0 and result["tasks_scored"] == 2.0
        server.fail_next(4, status=503)
        assert play_main(["--policy", policy]) == 1  # a server that stays down: one line, no traceback
        assert "failed after 4 attempts" in capsys.readouterr().err
