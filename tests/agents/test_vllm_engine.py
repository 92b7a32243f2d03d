"""VLLMEnginePolicy (an in-process vLLM engine) against a fake ``LLM``; no vllm import needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prm_gym.agents.vllm_engine import VLLMEnginePolicy, engine_args
from prm_gym.agents.vllm_fake import FakeLLM
from prm_gym.core.errors import ConfigError
from prm_gym.core.models import tiny_model, tiny_tokenizer
from prm_gym.core.policy import Policy, SamplingParams


@pytest.fixture(scope="module")
def tok() -> Any:
    return tiny_tokenizer()


def test_exact_ids_logprobs_and_request_fields(tok: Any) -> None:
    llm = FakeLLM(reply=lambda p, sp: [70, 71, 72, tok.eos_token_id])
    policy = VLLMEnginePolicy(llm, tok, seed=5, make_params=dict)
    assert isinstance(policy, Policy)
    gens = policy.generate([[10, 11, 12], [13]], SamplingParams(max_new_tokens=8, temperature=0.7))
    assert [g.token_ids for g in gens] == [[70, 71, 72, tok.eos_token_id]] * 2
    assert gens[0].logprobs == [pytest.approx(-0.01)] * 4 and gens[0].finish_reason == "stop"
    assert gens[0].text == tok.decode([70, 71, 72, tok.eos_token_id], skip_special_tokens=True)
    first = llm.params[0]
    assert first["logprobs"] == 0 and first["temperature"] == 0.7 and first["max_tokens"] == 8
    assert first["include_stop_str_in_output"] is True and first["stop"] == ["</tool_call>", "</answer>"]
    assert [p["seed"] for p in llm.params] == [5, 6]  # one seed per request, moving on
    (gen,) = policy.generate([[1]], SamplingParams(max_new_tokens=2))
    assert gen.finish_reason == "length" and len(gen.token_ids) == 2 and llm.params[-1]["seed"] == 7
    assert policy.generate([], SamplingParams()) == []


def test_load_weights_pushes_tensors_resets_the_cache_and_bumps_version(tok: Any) -> None:
    llm = FakeLLM()
    policy = VLLMEnginePolicy(llm, tok, make_params=dict)
    state = tiny_model(len(tok), seed=0).state_dict()
    assert policy.load_weights(state) == 1
    assert [n for n, _ in llm.loaded[0]] == list(state)
    assert all(t is state[n] for n, t in llm.loaded[0])  # handed over, not copied through the disk
    assert llm.calls[-2:] == ["reload_weights", "reset_prefix_cache"]
    (gen,) = policy.generate([[4, 5, 6]], SamplingParams(max_new_tokens=4))
    assert gen.logprobs == [pytest.approx(-0.02)] * 3  # sampled by the new weights
    assert policy.load_weights(iter(state.items()), version=7) == 7 and len(llm.loaded[1]) == len(state)


def test_a_tied_output_head_is_named_when_the_weights_leave_it_out(tok: Any) -> None:
    llm = FakeLLM()
    embed, norm = object(), object()
    VLLMEnginePolicy(llm, tok, tied_embeddings=True).load_weights({"model.embed_tokens.weight": embed, "n": norm})
    assert dict(llm.loaded[0])["lm_head.weight"] is embed  # vLLM repacks only the layers it is given
    VLLMEnginePolicy(llm, tok).load_weights({"model.embed_tokens.weight": embed})
    assert "lm_head.weight" not in dict(llm.loaded[1])  # untied: never invented


def test_missing_logprobs_are_an_error(tok: Any) -> None:
    policy = VLLMEnginePolicy(FakeLLM(), tok, make_params=lambda **kw: {**kw, "logprobs": None})
    with pytest.raises(RuntimeError, match="log-prob"):
        policy.generate([[1, 2, 3]], SamplingParams(max_new_tokens=4))


def test_from_id_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="vllm-engine:<directory"):
        VLLMEnginePolicy.from_id("vllm-engine:")
    with pytest.raises(ConfigError, match=r"config\.json"):
        VLLMEnginePolicy.from_id(f"vllm-engine:{tmp_path}")


def test_engine_args_layering() -> None:
    env = {"PRM_VLLM_ENGINE_ARGS": json.dumps({"dtype": "bfloat16", "max_model_len": 1024})}
    args = engine_args({"max_model_len": 512}, environ=env)
    assert args["dtype"] == "bfloat16" and args["max_model_len"] == 512
    assert args["logprobs_mode"] == "processed_logprobs"
    with pytest.raises(ConfigError, match="JSON object"):
        engine_args(environ={"PRM_VLLM_ENGINE_ARGS": "[1]"})


def test_rollout_worker_pushes_published_weights_into_the_engine(tok: Any) -> None:
    from prm_gym.training.worker import RolloutWorker, WorkerSpec

    worker = RolloutWorker(WorkerSpec(env_id="prm/Math-v0"), 0)
    llm = FakeLLM(reply=lambda p, sp: tok.encode("<answer>4</answer>", add_special_tokens=False))
    worker.policy = VLLMEnginePolicy(llm, tok, make_params=dict)
    state = tiny_model(len(tok), seed=1).state_dict()
    assert worker.set_weights(state, 3) == 3
    assert worker.policy.version == 3 and llm.loads == 1
    trajs = worker.play("math-train-0-00001", [0, 1], SamplingParams(max_new_tokens=16), 2048).leaves
    worker.close()
    assert len(trajs) == 2 and all(t.policy_version == 3 for t in trajs)
    assert all(t.turns[0].terms["outcome"] is not None for t in trajs)


def test_config_accepts_the_engine_id_and_refuses_it_with_ray() -> None:
    from prm_gym.training.config import TrainConfig
    from prm_gym.training.sources import learner_policy

    cfg = TrainConfig(policy="vllm-engine:/ckpt/policy")
    assert learner_policy(cfg) == "hf:/ckpt/policy"
    with pytest.raises(ConfigError, match="--backend local"):
        learner_policy(TrainConfig(policy="vllm-engine:/ckpt/policy", backend="ray", num_workers=1))
    with pytest.raises(ConfigError, match="vllm-engine:<dir>"):
        TrainConfig(policy="engine:/ckpt")
