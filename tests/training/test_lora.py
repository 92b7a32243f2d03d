"""LoRA through peft (issue #22, item 4): train steps, checkpoints, resume, publishing, eval."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from prm_gym.agents.vllm_fake import FakeVLLMServer
from prm_gym.core.errors import ConfigError
from prm_gym.core.models import tiny_model, tiny_tokenizer
from prm_gym.training.checkpoint import load_checkpoint
from prm_gym.training.cli import main
from prm_gym.training.config import AsyncConfig, EvalConfig, LoraConfig, TrainConfig
from prm_gym.training.lora import add_lora, apply_checkpoint, merged_state_dict, plain_copy, save_adapter
from prm_gym.training.metrics import read_metrics
from prm_gym.training.run import build_run
from prm_gym.training.sources import make_source, weight_publisher
from prm_gym.training.trainer import train
from tests.training.test_trainer import ENV_KW, small

peft = pytest.importorskip("peft")

LORA = LoraConfig(rank=4, alpha=8.0)
IDS = torch.tensor([[5, 17, 42, 99, 7, 3]])


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits


def lora_model(seed: int = 0) -> torch.nn.Module:
    """A tiny model with adapters whose B matrices are non-zero (as after some training)."""
    model = add_lora(tiny_model(len(tiny_tokenizer()), seed=seed), LORA)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def test_only_the_adapters_train_and_the_checkpoint_holds_only_them(tmp_path: Path) -> None:
    run = train(small(tmp_path, steps=1, lr=1e-2, lora=LORA))
    base = tiny_model(len(tiny_tokenizer()), seed=0)
    state = run.policy.model.state_dict()
    for key, value in base.state_dict().items():  # every base weight is where it started
        lora_key = (
            key.replace(".weight", ".base_layer.weight")
            if key.replace(".weight", ".base_layer.weight") in state
            else key
        )
        assert torch.equal(state[lora_key], value), key
    moved = [k for k, v in state.items() if "lora_B" in k and v.abs().sum() > 0]
    assert len(moved) == 8  # 2 layers x q, k, v, o
    trained = {id(p) for group in run.optimizer.param_groups for p in group["params"]}
    assert trained == {id(p) for n, p in run.policy.model.named_parameters() if "lora_" in n}
    ckpt = load_checkpoint(tmp_path)
    assert set(ckpt["model"]) == {k for k in state if ".lora_" in k}
    assert ckpt["lora"]["rank"] == 4 and ckpt["ref"] is None
    assert next(r for r in read_metrics(tmp_path) if "loss" in r)["trained_rows"] > 0


def test_a_resumed_lora_run_matches_an_uninterrupted_one(tmp_path: Path) -> None:
    full = train(small(tmp_path / "full", steps=2, lr=1e-2, lora=LORA))
    cfg = small(tmp_path / "part", steps=1, lr=1e-2, lora=LORA)
    train(cfg)
    resumed = train(dataclasses.replace(cfg, steps=2, resume=True))
    a, b = full.policy.model.state_dict(), resumed.policy.model.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert any("lora_B" in k and a[k].abs().sum() > 0 for k in a)
    rows = [r["reward"] for r in read_metrics(tmp_path / "part") if "loss" in r]
    assert rows == [r["reward"] for r in read_metrics(tmp_path / "full") if "loss" in r]
    with pytest.raises(ConfigError, match=r"trained --lora\.rank 4"):
        build_run(dataclasses.replace(cfg, steps=3, resume=True, lora=LoraConfig()))


def test_merged_weights_give_the_adapted_models_outputs() -> None:
    model = lora_model()
    plain = plain_copy(model)
    assert not any("lora" in k for k in plain.state_dict())
    assert torch.allclose(logits(plain), logits(model), atol=1e-5)
    assert not torch.allclose(logits(plain), logits(tiny_model(len(tiny_tokenizer()))), atol=1e-3)
    merged = merged_state_dict(model)
    by_peft = copy.deepcopy(model)  # peft's own merge, layer by layer, agrees with ours
    for module in by_peft.modules():
        if isinstance(module, peft.tuners.lora.LoraLayer):
            module.merge()
    for key, value in by_peft.state_dict().items():
        if ".lora_" not in key:
            assert torch.allclose(merged[key.replace(".base_layer.", ".")], value, atol=1e-6), key


def test_a_saved_adapter_loads_in_peft_with_the_same_outputs(tmp_path: Path) -> None:
    model = lora_model()
    save_adapter(model, tmp_path / "adapter")
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["r"] == 4
    loaded = peft.PeftModel.from_pretrained(tiny_model(len(tiny_tokenizer())), str(tmp_path / "adapter"))
    assert torch.allclose(logits(loaded), logits(model), atol=1e-6)


def test_asynchronous_workers_get_the_merged_weights(tmp_path: Path) -> None:
    cfg = small(tmp_path, lora=LORA, asynchronous=AsyncConfig(enabled=True, max_staleness=1))
    run = build_run(cfg)
    source = make_source(cfg, run.policy)
    try:
        worker = source.workers[0].policy.model  # type: ignore[attr-defined]
        assert not any("lora" in k for k in worker.state_dict())
        with torch.no_grad():
            for name, p in run.policy.model.named_parameters():
                if "lora_B" in name:
                    p.fill_(0.05)
        run.policy.version = 1
        weight_publisher(cfg, run.policy, source)()
        assert torch.allclose(logits(worker), logits(run.policy.model), atol=1e-5)
    finally:
        source.close()


def test_vllm_servers_reload_merged_weights_or_load_the_adapter(tmp_path: Path) -> None:
    tok = tiny_tokenizer()
    weights = tmp_path / "served"
    tiny_model(len(tok), seed=0).save_pretrained(weights)
    tok.save_pretrained(weights)
    answer = [*tok.encode("<answer>7</answer>", add_special_tokens=False), tok.eos_token_id]
    common = dict(steps=2, lr=1e-2, eval=EvalConfig(num_tasks=1, samples=1), vllm_weights=f"hf:{weights}")
    with FakeVLLMServer(reply=lambda p, r: answer, model=str(weights)) as server:
        run = train(small(tmp_path / "merged", policy=f"vllm:{server.base_url}", lora=LORA, **common))
    assert server.reloads == 2
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(str(weights))
    assert torch.allclose(logits(saved), logits(run.policy.model), atol=1e-5)

    adapter = dataclasses.replace(LORA, publish="adapter")
    with FakeVLLMServer(reply=lambda p, r: answer, model=str(weights)) as server:
        run = train(small(tmp_path / "adapter", policy=f"vllm:{server.base_url}", lora=adapter, **common))
    assert server.reloads == 0 and server.adapter_order == [f"{weights}-v1", f"{weights}-v2"]
    assert list(server.adapters) == [f"{weights}-v2"]  # the older adapter was unloaded
    asked = {r["model"] for r in server.requests if "prompt" in r}
    assert f"{weights}-v1" in asked  # step 2 sampled from the adapter published after step 1
    kept = sorted(p.name for p in (tmp_path / "adapter" / "adapters").iterdir())
    assert kept == ["v2"]
    base = AutoModelForCausalLM.from_pretrained(str(weights))  # the served base (the merged run's) is left alone
    assert torch.equal(logits(base), logits(saved))
    loaded = peft.PeftModel.from_pretrained(base, str(tmp_path / "adapter" / "adapters" / "v2"))
    assert torch.allclose(logits(loaded), logits(run.policy.model), atol=1e-5)


def test_adapter_publishing_is_for_vllm_servers() -> None:
    with pytest.raises(ConfigError, match=r"lora\.publish"):
        TrainConfig(lora=LoraConfig(rank=4, publish="adapter"))
    with pytest.raises(ConfigError, match=r"lora\.rank"):
        LoraConfig(rank=-1)


def test_eval_mode_and_init_checkpoint_use_the_adapters(tmp_path: Path) -> None:
    run = train(small(tmp_path, steps=1, lr=1e-2, lora=LORA))
    fresh = apply_checkpoint(tiny_model(len(tiny_tokenizer())), load_checkpoint(tmp_path))
    assert torch.allclose(logits(fresh), logits(run.policy.model), atol=1e-6)
    argv = ["--mode", "eval", "--env-kwargs", ENV_KW, "--output-dir", str(tmp_path), "--eval.num-tasks", "1"]
    assert main([*argv, "--eval.samples", "1", "--sampling.max-new-tokens", "4"]) == 0
    assert json.loads((tmp_path / "eval.json").read_text())["tasks_scored"] == 1
    warm = build_run(small(tmp_path / "warm", init_checkpoint=str(tmp_path / "checkpoint.pt")))
    assert not any("lora" in k for k in warm.policy.model.state_dict())  # a full run from the merged weights
    assert torch.allclose(logits(warm.policy.model), logits(run.policy.model), atol=1e-5)
