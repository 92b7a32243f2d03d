"""Learner step throughput on each device layout (the CPU, one GPU, FSDP on the GPU) and in each
precision (fp32 against bf16 autocast, at several micro-batch sizes).

The model has SmolLM2-135M's shape (30 Llama layers, hidden 576, vocabulary 49,152), randomly
initialised from its config (nothing is downloaded); the batch is ``ROWS`` sequences of
``LENGTH`` tokens with the last half trainable, micro-batches of ``MICRO``. A step is
:func:`prm_gym.training.update.learner_step`: forward, clipped policy-gradient loss, backward, AdamW.
Rows (``--sections``):

* ``gpu``: one GPU against the CPU (the baseline, on the same machine in the same run);
* ``fsdp``: ``--sharding fsdp`` with one rank, NCCL, against the plain GPU learner, i.e. what
  sharding's gathers cost when there is nothing to gain;
* ``precision``: bf16 autocast with fp32 master weights and AdamW state (``learner_step(autocast=True)``,
  what ``--precision bf16`` does) against fp32, on the same tokens (``--rows`` x ``--length``, last half
  trained) from the same initial weights, at each micro-batch of ``--micro`` that fits in memory (one
  that runs out says so), fp32 and bf16 steps alternated. Goal: bf16 >= 3x fp32 on a GPU. Printed beside
  it: the first step's loss on each side and their max abs difference, and the max abs difference of the
  trained tokens' log-probs (bf16 keeps about 3 significant digits: differences of ~1e-2 relative are
  bf16's, not a bug).

Without a GPU the ``gpu`` and ``fsdp`` rows say so, and ``precision`` runs at a CPU size (2 x 128 tokens,
micro-batch 4: about a minute on 2 cores).

    .venv/bin/python benchmarks/bench_learner.py [--sections gpu,fsdp,precision] [--micro 4,8,16,32]
        [--rows 32] [--length 512] [--device auto] [--json OUT]
"""

from __future__ import annotations

import argparse
import copy
import json
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
from prm_gym.training.update import learner_step, micro_logprobs

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


def batch(device: torch.device, rows: int = ROWS, length: int = LENGTH, vocab: int = 49000) -> Batch:
    """``rows`` x ``length`` random ids (the same for a seed), the last half of each row trained."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(10, vocab, (rows, length), generator=gen)
    attn = torch.ones(rows, length, dtype=torch.long)
    mask = torch.zeros(rows, length)
    mask[:, length // 2 :] = 1
    blp = -torch.rand(rows, length, generator=gen) * 5
    adv = torch.randn(rows, length, generator=gen)
    group = torch.zeros(rows, dtype=torch.long)
    return Batch(ids.to(device), attn.to(device), mask.to(device), blp.to(device), adv.to(device), group.to(device), {})


def tokens_per_s(model: Any, optimizer: torch.optim.Optimizer | None, device: torch.device, reps: int) -> list[float]:
    cfg = LossConfig(micro_batch_size=MICRO)
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-5)
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


def device_rows() -> None:
    """The ``gpu`` row (one GPU against the CPU)."""
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


def fsdp_rows() -> None:
    """The ``fsdp`` row (FSDP with one rank against the plain GPU learner)."""
    import torch.distributed as dist

    from prm_gym.training import fsdp

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("nccl", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    gpu = tokens_per_s(smollm2_shaped().to(dev), None, dev, REPS)
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


def tiny_shaped() -> Any:
    """A small random Llama (4 layers, hidden 64, SmolLM2's vocabulary) for dry runs (``--model tiny``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4
    )
    return LlamaForCausalLM(cfg)


def _step(model: Any, opt: torch.optim.Optimizer, data: Batch, micro: int, bf16: bool) -> tuple[float, float]:
    """``(seconds, loss)`` of one learner step."""
    if data.input_ids.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    stats = learner_step(model, opt, data, LossConfig(micro_batch_size=micro), autocast=bf16)
    if data.input_ids.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, stats["loss"]


def logprob_gap(fp32: Any, data: Batch, micro: int) -> float:
    """Max abs difference of the trained tokens' log-probs, fp32 against bf16 autocast, same weights."""
    ids, attn, mask = data.input_ids[:micro], data.attention_mask[:micro], data.loss_mask[:micro]
    with torch.no_grad():
        a = micro_logprobs(fp32, ids, attn, 1.0, False, mask)
        b = micro_logprobs(fp32, ids, attn, 1.0, True, mask)
    return float(((a - b).abs() * mask).max())


def precision_rows(args: argparse.Namespace, dev: torch.device, record: dict[str, Any]) -> None:
    """fp32 against bf16 autocast at each micro-batch size, on the same tokens from the same weights."""
    make = tiny_shaped if args.model == "tiny" else smollm2_shaped
    fp32 = make().to(dev)
    bf16 = copy.deepcopy(fp32)  # the same initial weights: the first step's losses compare
    opts = {False: torch.optim.AdamW(fp32.parameters(), lr=1e-5), True: torch.optim.AdamW(bf16.parameters(), lr=1e-5)}
    models = {False: fp32, True: bf16}
    data = batch(dev, args.rows, args.length)
    tokens = args.rows * args.length
    gap = logprob_gap(fp32, data, min(args.micro))
    first: dict[bool, float] = {}
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    cond = f"{args.model} model, {args.rows}x{args.length} tokens (half trained), AdamW fp32 state, {where}"
    print(f"precision: {cond}")
    print("| micro-batch | fp32 tokens/s | bf16 tokens/s | bf16/fp32 | peak GPU memory |\n|---|---|---|---|---|")
    for micro in args.micro:
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        rates: dict[bool, list[float]] = {False: [], True: []}
        try:
            for i in range(args.warmup + args.reps):
                for side in (False, True):  # alternated
                    seconds, loss = _step(models[side], opts[side], data, micro, side)
                    first.setdefault(side, loss)
                    if i >= args.warmup:
                        rates[side].append(tokens / seconds)
        except torch.cuda.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            why = f"out of GPU memory at micro-batch {micro} ({str(exc).splitlines()[0][:80]})"
            print(f"| {micro} | - | - | - | {why} |")
            skipped("learner", f"learner step, bf16 autocast vs fp32, micro-batch {micro}", "fp32", why, "tokens/s")
            continue
        peak = f"{torch.cuda.max_memory_allocated(dev) / 2**30:.1f} GiB" if dev.type == "cuda" else "n/a"
        a, b = statistics.median(rates[True]), statistics.median(rates[False])
        row = f"| {micro} | {b:,.0f} ({spread(rates[False])}) | {a:,.0f} ({spread(rates[True])}) | {a / b:.2f}x"
        print(f"{row} | {peak} |")
        record["precision"].append({"micro": micro, "fp32": rates[False], "bf16": rates[True], "peak": peak})
        diff = abs(first[True] - first[False])
        emit(
            "learner",
            f"learner step, bf16 autocast vs fp32, micro-batch {micro} ({dev.type})",
            a,
            b,
            "fp32 (the same tokens, weights and optimiser)",
            "tokens/s",
            "higher",
            spread=f"ours {spread(rates[True])}, baseline {spread(rates[False])}",
            note=f"goal >= 3x on a GPU; {cond}; first-step |loss diff| {diff:.2e}, log-prob max |diff| {gap:.2e}",
        )
    if first:
        diff, scale = abs(first[True] - first[False]), max(1.0, abs(first[False]))
        verdict = "within" if diff <= 1e-2 * scale else "OUTSIDE"
        print(f"first step's loss: fp32 {first[False]:.6f}, bf16 {first[True]:.6f}, max abs difference {diff:.2e} "
              f"({verdict} bf16's tolerance 1e-2 x max(1, |loss|)); trained tokens' log-probs: max abs difference "
              f"{gap:.2e}; goal: bf16 >= 3x fp32 on a GPU")  # fmt: skip
        record.update(first_loss={"fp32": first[False], "bf16": first[True]}, loss_diff=diff, logprob_diff=gap)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default="gpu,fsdp,precision", help="comma-separated: gpu, fsdp, precision")
    p.add_argument("--device", default="auto", help="auto|cpu|cuda|cuda:N (the precision rows)")
    p.add_argument("--micro", default="", help="precision: comma-separated micro-batch sizes (GPU 4,8,16,32; CPU 4)")
    p.add_argument("--rows", type=int, default=0, help="precision: rows of the batch (GPU 32, CPU 2)")
    p.add_argument("--length", type=int, default=0, help="precision: tokens a row (GPU 512, CPU 128)")
    p.add_argument("--reps", type=int, default=0, help="precision: timed steps a side (GPU 5, CPU 2)")
    p.add_argument("--warmup", type=int, default=1, help="precision: untimed steps a side first")
    p.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2", help="tiny: 4 layers, for dry runs")
    p.add_argument("--json", default="", help="write the precision measurements here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from prm_gym.core.errors import ConfigError
    from prm_gym.training.ddp import resolve_device

    args = parse_args(argv)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    try:
        dev = resolve_device(args.device)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    gpu = dev.type == "cuda"
    args.micro = [int(m) for m in args.micro.split(",") if m.strip()] or ([4, 8, 16, 32] if gpu else [4])
    args.rows = args.rows or (32 if gpu else 2)
    args.length = args.length or (512 if gpu else 128)
    args.reps = args.reps or (5 if gpu else 2)
    if not torch.cuda.is_available():  # the CPU baseline alone would take minutes and compare nothing
        if "gpu" in sections:
            skipped("learner", "learner step, one GPU", "the CPU", "no CUDA device on this machine", "tokens/s")
        if "fsdp" in sections:
            skipped("learner", "learner step, FSDP (1 rank)", "one GPU, unsharded", "no CUDA device", "tokens/s")
    else:
        if "gpu" in sections:
            device_rows()
        if "fsdp" in sections:
            fsdp_rows()
    record: dict[str, Any] = {"device": str(dev), "rows": args.rows, "length": args.length, "precision": []}
    if "precision" in sections:
        precision_rows(args, dev, record)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
