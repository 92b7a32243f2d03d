"""VLLMPolicy against in-process fake vLLM servers (real HTTP on localhost)."""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import rollout
from prm_gym.agents.vllm import PolicyServerError, VLLMPolicy
from prm_gym.agents.vllm_fake import FakeVLLMServer
from prm_gym.core.models import tiny_tokenizer
from prm_gym.core.policy import SamplingParams


@pytest.fixture(scope="module")
def tok() -> Any:
    return tiny_tokenizer()


def test_exact_ids_logprobs_and_request_fields(tok: Any) -> None:
    with FakeVLLMServer(reply=lambda p, r: [70, 71, 72, 2], model="base") as server:
        policy = VLLMPolicy(server.base_url, tok, model="base", seed=3)
        gens = policy.generate([[10, 11, 12], [13]], SamplingParams(max_new_tokens=8, temperature=0.7))
    assert [g.token_ids for g in gens] == [[70, 71, 72, 2], [70, 71, 72, 2]]
    assert gens[0].logprobs == [pytest.approx(-0.01)] * 4
    assert gens[0].text == tok.decode([70, 71, 72, 2], skip_special_tokens=True)
    assert gens[0].finish_reason == "stop"
    req = server.requests[0]
    assert req["prompt"] in ([10, 11, 12], [13]) and req["return_tokens_as_token_ids"] is True
    assert req["logprobs"] == 1 and req["include_stop_str_in_output"] is True and req["temperature"] == 0.7
    assert {r["seed"] for r in server.requests} == {3, 4}


def test_length_finish_and_server_errors_raise_infra(tok: Any) -> None:
    with FakeVLLMServer(reply=lambda p, r: list(range(40, 60))) as server:
        policy = VLLMPolicy(server.base_url, tok, model="base")
        (gen,) = policy.generate([[5]], SamplingParams(max_new_tokens=4))
        assert gen.finish_reason == "length" and len(gen.token_ids) == 4
        server.fail_next(1, status=503)
        with pytest.raises(PolicyServerError, match="503"):
            policy.generate([[5]], SamplingParams(max_new_tokens=4))
    dead = VLLMPolicy(server.base_url, tok, model="base", timeout_s=2)
    with pytest.raises(PolicyServerError, match="failed"):
        dead.generate([[5]], SamplingParams(max_new_tokens=4))


def test_many_requests_in_flight(tok: Any) -> None:
    with FakeVLLMServer(delay_s=0.2) as server:
        policy = VLLMPolicy(server.base_url, tok, model="base", max_in_flight=16)
        policy.generate([[i, i + 1, i + 2] for i in range(16)], SamplingParams(max_new_tokens=4))
    assert server.max_in_flight >= 8


def test_multi_turn_episodes_stick_to_one_server(tok: Any) -> None:
    servers = [FakeVLLMServer(name=f"s{i}", delay_s=0.01).start() for i in range(3)]
    try:
        policy = VLLMPolicy([s.base_url for s in servers], tok, model="base")
        envs_ = [gym.make("prm/Math-v0") for _ in range(6)]
        trajs = rollout(
            envs_, policy, ChatTemplate(tok), seeds=list(range(6)), sampling=SamplingParams(max_new_tokens=8)
        )
        for e in envs_:
            e.close()
    finally:
        for s in servers:
            s.close()
    assert sum(len(t.turns) for t in trajs) > 6  # several multi-turn episodes
    for traj in trajs:
        holders = [s.name for s in servers for r in s.requests if traj.token_ids[: len(r["prompt"])] == r["prompt"]]
        assert len(set(holders)) == 1, holders
        # the trained ids are exactly the ids the server sampled
        for turn in traj.turns:
            assert traj.loss_mask[turn.start : turn.end] == [1] * (turn.end - turn.start)
    assert sum(1 for s in servers if s.requests) >= 2  # new episodes are spread out


def test_lora_hot_load_and_full_reload_bump_version(tok: Any, tmp_path: Any) -> None:
    with FakeVLLMServer() as a, FakeVLLMServer() as b:
        policy = VLLMPolicy([a.base_url, b.base_url], tok, model="base")
        assert policy.load_lora(str(tmp_path / "step1")) == 1
        assert a.adapters == {"base-v1": str(tmp_path / "step1")} == b.adapters
        (gen,) = policy.generate([[9]], SamplingParams(max_new_tokens=2))
        assert gen.logprobs[0] == pytest.approx(-0.1)  # served by the adapter
        assert policy.load_lora(str(tmp_path / "step2")) == 2
        assert list(a.adapters) == ["base-v2"] and policy.served == "base-v2"
        assert policy.reload_weights() == 3 and a.reloads == b.reloads == 1
        assert [path for path, _ in a.admin][-2:] == ["/collective_rpc", "/reset_prefix_cache"]  # no stale KV
        (gen,) = policy.generate([[9]], SamplingParams(max_new_tokens=2))
        assert gen.logprobs[0] == pytest.approx(-0.02) and policy.served == "base"
        with pytest.raises(PolicyServerError, match="already been loaded"):
            policy.load_lora(str(tmp_path / "step2"), version=2)  # base-v2 is still loaded: refused
        assert policy.version == 3


def test_update_waits_for_in_flight_batch(tok: Any, tmp_path: Any) -> None:
    with FakeVLLMServer(delay_s=0.3) as server:
        policy = VLLMPolicy(server.base_url, tok, model="base")
        out: list[Any] = []
        t = threading.Thread(target=lambda: out.extend(policy.generate([[1], [2]], SamplingParams(max_new_tokens=2))))
        t.start()
        while not server.in_flight:
            pass
        policy.load_lora(str(tmp_path / "a"))
        t.join()
    assert [g.logprobs[0] for g in out] == [pytest.approx(-0.01)] * 2  # the whole batch saw version 0
    assert server.admin[0][0] == "/v1/load_lora_adapter" and policy.version == 1


def test_train_agent_with_a_vllm_policy_reloads_weights_every_step(tok: Any, tmp_path: Any) -> None:
    from prm_gym.core.models import tiny_model
    from prm_gym.training.cli import main

    weights = tmp_path / "served"
    tiny_model(len(tok), seed=0).save_pretrained(weights)
    tok.save_pretrained(weights)
    calls = itertools.count()
    answers = [[*tok.encode(a, add_special_tokens=False), tok.eos_token_id] for a in ("<answer>7</answer>", "hmm")]
    with FakeVLLMServer(reply=lambda p, r: answers[next(calls) % 2], model=str(weights)) as server:
        out = tmp_path / "run"
        argv = ["--policy", f"vllm:{server.base_url}", "--vllm-weights", f"hf:{weights}", "--steps", "2"]
        argv += ["--group-size", "2", "--tasks-per-step", "1", "--output-dir", str(out), "--no-tensorboard"]
        argv += ["--eval.num-tasks", "1", "--eval.samples", "1"]
        assert main([*argv, "--no-progress", "--sampling.max-new-tokens", "24"]) == 0
    assert server.reloads == 2  # one full-weight reload after each learner step
    assert all(r["model"] == str(weights) and r["return_tokens_as_token_ids"] for r in server.requests)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "trained_rows" in r] == [1, 2]
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(weights).state_dict()
    initial = tiny_model(len(tok), seed=0).state_dict()
    assert any(not (trained[k] == v).all() for k, v in initial.items())  # the server's files hold new weights


def test_config_names_the_missing_served_weights() -> None:
    from prm_gym.core.errors import ConfigError
    from prm_gym.training.cli import parse
    from prm_gym.training.config import TrainConfig

    with pytest.raises(ConfigError, match="vllm_weights"):
        TrainConfig(policy="vllm:http://127.0.0.1:8000/v1")
    with pytest.raises(ConfigError, match="num_workers"):
        TrainConfig(backend="ray", num_workers=0)
    cfg = parse(["--policy", "vllm:http://a/v1,http://b/v1", "--vllm-weights", "hf:/ckpt", "--backend", "ray"])
    assert cfg.backend == "ray" and cfg.num_workers == 1 and cfg.vllm_weights == "hf:/ckpt"


@pytest.mark.asyncio
async def test_agenerate_runs_inside_a_running_event_loop(tok: Any) -> None:
    """The async path is awaited from a running loop (as an async trainer would), requests in flight together."""
    import asyncio

    with FakeVLLMServer(reply=lambda p, r: [70, 71, 2], model="base", delay_s=0.2) as server:
        policy = VLLMPolicy(server.base_url, tok, model="base", seed=1)
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        beat = asyncio.create_task(heartbeat())
        gens = await policy.agenerate([[10, 11], [12], [13]], SamplingParams(max_new_tokens=4))
        beat.cancel()
    assert [g.token_ids for g in gens] == [[70, 71, 2]] * 3
    assert ticks >= 3  # the loop kept running while the requests were awaited
    assert len(server.requests) == 3
