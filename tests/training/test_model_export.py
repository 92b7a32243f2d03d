"""Trained weights leave the trainer (issue #33, item 1): every checkpoint exports a transformers
folder (or a peft adapter with a loadable base), and a run directory is accepted wherever a model is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from prm_gym.agents.play import main as play_main
from prm_gym.agents.vllm_engine import weights_dir
from prm_gym.core.errors import ConfigError
from prm_gym.core.models import load_hf, model_dir
from prm_gym.training.checkpoint import CHECKPOINT
from prm_gym.training.cli import main as train_main
from prm_gym.training.config import LoraConfig, TrainConfig
from prm_gym.training.trainer import train
from tests.training.test_trainer import ENV_KW, small

IDS = torch.tensor([[5, 17, 42, 99, 7, 3]])


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.Tensor]:
    out = tmp_path_factory.mktemp("full")
    run = train(small(out, steps=2, lr=1e-2))
    return out, logits(run.policy.model.eval())


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.Tensor]:
    out = tmp_path_factory.mktemp("lora")
    run = train(small(out, steps=2, lr=1e-2, lora=LoraConfig(rank=4, alpha=8.0)))
    return out, logits(run.policy.model.eval())


def test_a_run_exports_a_transformers_folder_that_loads_with_the_trained_weights(
    full_run: tuple[Path, torch.Tensor],
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, trained = full_run
    folder = out / "model"
    assert (folder / "config.json").exists() and (folder / "model.safetensors").exists()
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    assert torch.allclose(logits(model), trained, atol=1e-5)
    tok = AutoTokenizer.from_pretrained(str(folder))
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")  # the chat template travels with it
    assert not list(out.glob(".model-*"))  # no temporary folder left behind
    # the resumable state loads without unpickling arbitrary objects
    state = torch.load(out / CHECKPOINT, map_location="cpu", weights_only=True)
    assert state["step"] == 2


def test_a_lora_run_exports_a_peft_adapter_whose_base_loads(lora_run: tuple[Path, torch.Tensor]) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out, trained = lora_run
    adapter = out / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    base_dir = Path(config["base_model_name_or_path"])
    assert base_dir == (out / "base").resolve()  # hf:tiny has no folder: the base is saved once
    base = AutoModelForCausalLM.from_pretrained(str(base_dir))
    model = PeftModel.from_pretrained(base, str(adapter))
    assert torch.allclose(logits(model), trained, atol=1e-5)
    assert not torch.allclose(logits(base.__class__.from_pretrained(str(base_dir))), trained, atol=1e-4)


Made = tuple[Path, torch.Tensor]


def test_a_run_directory_is_a_policy_id(full_run: Made, lora_run: Made) -> None:
    for out, trained in (full_run, lora_run):
        model, tok = load_hf(f"hf:{out}")
        assert torch.allclose(logits(model), trained, atol=1e-5), out
        assert tok.chat_template
    assert weights_dir(f"vllm-engine:{full_run[0]}") == str(full_run[0] / "model")
    with pytest.raises(ConfigError, match="LoRA adapter"):
        weights_dir(f"vllm-engine:{lora_run[0]}")


def test_a_moved_lora_run_still_loads_from_its_own_base(lora_run: tuple[Path, torch.Tensor], tmp_path: Path) -> None:
    import shutil

    out, trained = lora_run
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    shutil.rmtree(moved / "adapter")
    shutil.copytree(out / "adapter", moved / "adapter")
    config_file = moved / "adapter" / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    config_file.write_text(json.dumps(config))
    model, _ = load_hf(f"hf:{moved}")
    assert torch.allclose(logits(model), trained, atol=1e-5)


def test_prm_play_and_eval_accept_a_run_directory(
    full_run: tuple[Path, torch.Tensor], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = full_run
    code = play_main(["--env", "prm/Math-v0", "--policy", f"hf:{out}", "--max-new-tokens", "4", "--temperature", "0"])
    assert code == 0
    printed = capsys.readouterr().out
    assert f"loaded hf:{out}" in printed and " turns: return " in printed
    code = train_main(
        [
            "--mode", "eval", "--policy", f"hf:{out}", "--env-kwargs", ENV_KW, "--output-dir", str(tmp_path / "ev"),
            "--eval.num-tasks", "1", "--eval.samples", "1", "--sampling.max-new-tokens", "4", "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    assert json.loads((tmp_path / "ev" / "eval.json").read_text())["tasks_scored"] == 1.0


def test_a_folder_with_nothing_loadable_says_what_it_expected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no model"):
        model_dir(tmp_path)
    (tmp_path / CHECKPOINT).write_bytes(b"")
    with pytest.raises(ConfigError, match="--resume"):
        model_dir(tmp_path)
    assert play_main(["--policy", f"hf:{tmp_path}"]) == 2  # one line on stderr, no traceback


def test_a_lora_run_on_a_model_folder_points_its_adapter_at_that_folder(full_run: Made, tmp_path: Path) -> None:
    out = tmp_path / "on-folder"
    train(small(out, steps=1, policy=f"hf:{full_run[0]}", lora=LoraConfig(rank=4)))
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert Path(config["base_model_name_or_path"]) == (full_run[0] / "model").resolve()
    assert not (out / "base").exists()  # nothing copied: the base already has a folder


def test_vllm_servers_serve_and_reload_a_run_directory_s_model(full_run: Made, lora_run: Made, tmp_path: Path) -> None:
    """``--vllm-weights hf:<run dir>`` goes with ``vllm serve <run dir>/model``: requests name that
    folder and the learner writes its weights back into it (not beside it, into the run directory)."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prm_gym.agents.vllm_fake import FakeVLLMServer
    from prm_gym.training.sources import served_weights

    served = tmp_path / "served"
    shutil.copytree(full_run[0], served)
    tok = AutoTokenizer.from_pretrained(str(served / "model"))
    answer = [*tok.encode("<answer>7</answer>", add_special_tokens=False), tok.eos_token_id]
    with FakeVLLMServer(reply=lambda p, r: answer, model=str(served / "model")) as server:
        run = train(small(tmp_path / "next", steps=1, lr=1e-2, policy=f"vllm:{server.base_url}",
                          vllm_weights=f"hf:{served}"))  # fmt: skip
        assert server.reloads == 1 and {r["model"] for r in server.requests if "prompt" in r} == {str(served / "model")}
    assert not (served / "config.json").exists()  # nothing written beside model/
    saved = AutoModelForCausalLM.from_pretrained(str(served / "model"))
    assert torch.allclose(logits(saved), logits(run.policy.model.eval()), atol=1e-5)
    assert not torch.allclose(logits(saved), full_run[1], atol=1e-4)  # the step's weights, written back
    lora_cfg = TrainConfig(policy="vllm:http://127.0.0.1:1/v1", vllm_weights=f"hf:{lora_run[0]}")
    with pytest.raises(ConfigError, match="adapter/"):
        served_weights(lora_cfg)  # vLLM servers reload full weights, which a LoRA run has not exported
