"""Learner step throughput on each device layout: the CPU, one GPU, and FSDP on the GPU.

The model has SmolLM2-135M's shape (30 Llama layers, hidden 576, vocabulary 49,152), randomly
initialised from its config (nothing is downloaded); the batch is ``ROWS`` sequences of
``LENGTH`` tokens with the last half trainable, micro-batches of ``MICRO``. A step is
:func:`prm_gym.training.trainer.learner_step`: forward, clipped policy-gradient loss, backward, AdamW.
Rows: one GPU against the CPU (the baseline, on the same machine in the same run), and FSDP
(``--sharding fsdp`` with one rank, NCCL) against the plain GPU learner, i.e. what sharding's
gathers cost when there is nothing to gain. Without a GPU the rows say so.

    .venv/bin/python benchmarks/bench_learner.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_line import emit, skipped, spread

from prm_gym.training.batch import Batch
from prm_gym.training.config import LossConfig
from prm_gym.training.update import learner_step

ROWS, LENGTH, MICRO = 8, 512, 4
WARMUP, REPS = 2, 5
CPU_REPS = 2


def smollm2_shaped() -> Any:
    """A randomly initialised Llama with SmolLM2-135M's configuration."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def batch(device: torch.device) -> Batch:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 49000, (ROWS, LENGTH), generator=gen)
    attn = torch.ones(ROWS, LENGTH, dtype=torch.long)
    mask = torch.zeros(ROWS, LENGTH)
    mask[:, LENGTH // 2 :] = 1
    blp = -torch.rand(ROWS, LENGTH, generator=gen) * 5
    adv = torch.randn(ROWS, LENGTH, generator=gen)
    group = torch.zeros(ROWS, dtype=torch.long)
    return Batch(ids.to(device), attn.to(device), mask.to(device), blp.to(device), adv.to(device), group.to(device), {})


def tokens_per_s(model: Any, optimizer: torch.optim.Optimizer, device: torch.device, reps: int) -> list[float]:
    cfg = LossConfig(micro_batch_size=MICRO)
    data = batch(device)
    out = []
    for i in range(WARMUP + reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        learner_step(model, optimizer, data, cfg)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= WARMUP:
            out.append(ROWS * LENGTH / (time.perf_counter() - t0))
    return out


def main() -> None:
    if not torch.cuda.is_available():  # the CPU baseline alone would take minutes and compare nothing
        skipped("learner", "learner step, one GPU", "the CPU", "no CUDA device on this machine", "tokens/s")
        skipped("learner", "learner step, FSDP (1 rank)", "one GPU, unsharded", "no CUDA device", "tokens/s")
        return
    cpu_model = smollm2_shaped()
    cpu = tokens_per_s(cpu_model, torch.optim.AdamW(cpu_model.parameters(), lr=1e-5), torch.device("cpu"), CPU_REPS)
    print(f"cpu ({torch.get_num_threads()} threads): {statistics.median(cpu):,.0f} tokens/s")
    dev = torch.device("cuda", 0)
    model = smollm2_shaped().to(dev)
    gpu = tokens_per_s(model, torch.optim.AdamW(model.parameters(), lr=1e-5), dev, REPS)
    name = torch.cuda.get_device_name(0)
    print(f"{name}: {statistics.median(gpu):,.0f} tokens/s")
    emit(
        "learner",
        f"learner step, one GPU ({name}, fp32)",
        statistics.median(gpu),
        statistics.median(cpu),
        f"the CPU ({torch.get_num_threads()} threads)",
        "tokens/s",
        "higher",
        spread=f"ours {spread(gpu)}, baseline {spread(cpu)}",
        note="SmolLM2-135M shape, 8x512 tokens",
    )
    import torch.distributed as dist

    from prm_gym.training import fsdp

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("nccl", rank=0, world_size=1)
    plain = smollm2_shaped().to(dev)
    sharded, opt = fsdp.shard(plain, torch.optim.AdamW(plain.parameters(), lr=1e-5))
    fs = tokens_per_s(sharded, opt, dev, REPS)
    print(f"FSDP, 1 rank: {statistics.median(fs):,.0f} tokens/s")
    emit(
        "learner",
        "learner step, FSDP (1 rank, NCCL)",
        statistics.median(fs),
        statistics.median(gpu),
        "one GPU, unsharded",
        "tokens/s",
        "higher",
        spread=f"ours {spread(fs)}, baseline {spread(gpu)}",
        note="what the shard gathers cost with nothing to shard over",
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
