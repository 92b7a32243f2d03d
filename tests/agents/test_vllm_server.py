"""prm_gym.agents.vllm_server without vLLM: weight export for serving, and the server's command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from prm_gym.agents.vllm import PolicyServerError
from prm_gym.agents.vllm_server import VLLMServer, export_hf_weights


def test_export_unties_the_output_embedding_and_keeps_the_function(tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from prm_gym.core.models import load_hf

    tied = export_hf_weights("hf:tiny", tmp_path / "tied")
    untied = export_hf_weights("hf:tiny", tmp_path / "untied", untie=True)
    assert json.loads((tied / "config.json").read_text())["tie_word_embeddings"] is True
    assert json.loads((untied / "config.json").read_text())["tie_word_embeddings"] is False
    state = load_file(str(untied / "model.safetensors"))
    assert torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"])
    model = AutoModelForCausalLM.from_pretrained(untied, dtype=torch.float32).eval()
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    ref, _ = load_hf("hf:tiny")
    ids = torch.tensor([[1, 5, 9, 13]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, ref.eval()(ids).logits, atol=1e-6)


def test_server_command_and_environment(tmp_path: Path) -> None:
    server = VLLMServer(tmp_path / "m", args=["--dtype", "float32"], python="/py", port=1234, lora=True)
    cmd = server.command()
    assert cmd[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[-1] == "--enable-lora" and "--dtype" in cmd and cmd[cmd.index("--port") + 1] == "1234"
    env = server._environ()
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env["HF_HUB_OFFLINE"] == "1" and server.base_url == "http://127.0.0.1:1234/v1"
    server.python = None
    with pytest.raises(PolicyServerError, match="make test-vllm"):
        server.command()


def test_a_server_that_exits_at_once_is_reported_with_its_log(tmp_path: Path) -> None:
    server = VLLMServer(tmp_path / "m", python="/bin/false", startup_timeout_s=30)
    with pytest.raises(PolicyServerError, match="vllm exited with 1"):
        server.start()
    assert server.proc is None  # closed
