"""The learner on a GPU (marked ``gpu``; ``make test-gpu``): one process on cuda, and torchrun
with NCCL under DDP and FSDP. ``make test-gpu-dry`` (``PRM_GPU_DRY_RUN=1``) runs the same tests on
the CPU, torchrun with gloo, so their code is checked before a GPU is at hand.

This file is also the script torchrun runs (``python test_gpu.py OUT SHARDING DEVICE``): the rank
trains two steps with each ``--sharding`` and records the process group's backend and the device.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_trainer import small as trainer_small  # the suite's small Math run (tests/training is on sys.path)

from prm_gym.agents.hf import HFPolicy
from prm_gym.core.policy import SamplingParams
from prm_gym.training.checkpoint import load_checkpoint
from prm_gym.training.config import LossConfig, TrainConfig
from prm_gym.training.metrics import read_metrics
from prm_gym.training.trainer import train

pytestmark = pytest.mark.gpu


def small(out: Path, **changes: object) -> TrainConfig:
    """test_trainer's small run with two groups a step and one row a micro-batch."""
    return trainer_small(out, **{"tasks_per_step": 2, "loss": LossConfig(micro_batch_size=1), **changes})


def test_one_process_trains_on_the_gpu_and_resumes_on_the_cpu(tmp_path: Path, gpu_device: str) -> None:
    run = train(small(tmp_path, device=gpu_device))
    assert next(run.policy.model.parameters()).device.type == gpu_device
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2] and all(r["loss"] == r["loss"] for r in rows)
    assert load_checkpoint(tmp_path)["step"] == 2
    resumed = train(small(tmp_path, steps=3, resume=True, device="cpu"))
    assert next(resumed.policy.model.parameters()).device.type == "cpu"
    assert resumed.step == 3


def test_behaviour_logprobs_on_the_gpu_match_a_forward_pass(gpu_device: str) -> None:
    policy = HFPolicy.from_id("hf:tiny", seed=0)
    policy.model.to(gpu_device)
    prompt = policy.tokenizer.encode("2+3=")
    gen = policy.generate([prompt], SamplingParams(max_new_tokens=8, temperature=1.0))[0]
    ids = torch.tensor([prompt + gen.token_ids], device=gpu_device)
    with torch.no_grad():
        logp = torch.log_softmax(policy.model(input_ids=ids).logits.float(), -1)
    picked = logp[0, len(prompt) - 1 : -1].gather(-1, ids[0, len(prompt) :, None]).squeeze(-1)
    torch.testing.assert_close(picked.cpu(), torch.tensor(gen.logprobs), atol=1e-4, rtol=1e-4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_torchrun_nccl_learner(tmp_path: Path, sharding: str, gpu_device: str) -> None:
    nproc = str(min(torch.cuda.device_count(), 2) if gpu_device == "cuda" else 2)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", nproc, "--master-addr", "127.0.0.1"]
    cmd += ["--master-port", str(_free_port()), __file__, str(tmp_path), sharding, gpu_device]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    seen = json.loads((tmp_path / "rank0.json").read_text())
    backend = "nccl" if gpu_device == "cuda" else "gloo"
    assert seen["backend"] == backend and seen["device"].startswith(gpu_device) and seen["world"] == int(nproc)
    assert [r["step"] for r in read_metrics(tmp_path / "run") if "loss" in r] == [1, 2]
    assert load_checkpoint(tmp_path / "run")["step"] == 2


def worker(out: Path, sharding: str, device: str) -> None:
    """What each torchrun rank runs: two steps on its GPU (``device``) with ``sharding``."""
    import torch.distributed as dist

    from prm_gym.training.ddp import setup_learner
    from prm_gym.training.run import build_run

    cfg = small(out / "run", sharding=sharding, device=device)
    learner = setup_learner(build_run(cfg))  # what train() does first: join the group, place the model
    seen = {"backend": dist.get_backend(), "world": learner.world_size, "device": str(learner.device)}
    learner.close()
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))
    run = train(cfg)
    assert next(run.policy.model.parameters()).device.type == device


if __name__ == "__main__":
    worker(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
