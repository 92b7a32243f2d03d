"""Learner-step throughput: one process versus two DDP ranks (gloo, CPU), on the same batch.

Both run :func:`prm_gym.training.trainer.learner_step` on the same synthetic batch (tiny Llama model,
``--rows`` trajectories of ``--length`` tokens, 60% of them sampled) with one torch thread per
process; the DDP run is ``torchrun --nproc-per-node 2`` of this script. After a warm-up step we
time ``--reps`` steps and report trained tokens/s (median, spread) and the ratio against one
process. On a 2-core machine shared with other work, expect well under 2x: the ranks compete for
the cores and gloo all-reduces the gradients every micro-batch.

    .venv/bin/python benchmarks/bench_ddp.py [--rows 32] [--length 256] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_line import emit, median, spread

from prm_gym.core.models import tiny_model
from prm_gym.training.batch import Batch
from prm_gym.training.config import LossConfig
from prm_gym.training.update import learner_step


def make_batch(rows: int, length: int, vocab: int = 259) -> Batch:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, length), generator=gen)
    attn = torch.ones(rows, length, dtype=torch.long)
    mask = (torch.rand(rows, length, generator=gen) < 0.6).float()
    return Batch(
        ids,
        attn,
        mask,
        -torch.rand(rows, length, generator=gen),
        torch.randn(rows, length, generator=gen),
        ids[:, 0],
        {},
    )


def measure(args: argparse.Namespace, wrap: Any = None) -> list[float]:
    """Trained tokens/s of ``args.reps`` learner steps after one warm-up step."""
    torch.set_num_threads(1)
    model = tiny_model(259, seed=0, hidden=args.hidden, layers=args.layers)
    learner = wrap(model) if wrap else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, cfg = make_batch(args.rows, args.length), LossConfig(micro_batch_size=args.micro)
    learner_step(learner, opt, batch, cfg)
    rates = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        learner_step(learner, opt, batch, cfg)
        rates.append(float(batch.loss_mask.sum()) / (time.perf_counter() - t0))
    return rates


def rank_main(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rates = measure(args, DistributedDataParallel)
    if dist.get_rank() == 0:
        print("RATES " + json.dumps(rates), flush=True)
    dist.destroy_process_group()


def ddp_rates(argv: list[str]) -> list[float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    cmd += ["--master-port", str(port), __file__, "--rank-mode", *argv]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("RATES "))
    return [float(v) for v in json.loads(line[6:])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rank-mode", action="store_true", help=argparse.SUPPRESS)
    args, argv = ap.parse_args(), [a for a in sys.argv[1:] if a != "--rank-mode"]
    if args.rank_mode:
        rank_main(args)
        return
    one, two = [], []
    for _ in range(3):  # alternated rounds: both learners see the same machine load
        one += measure(args)
        two += ddp_rates(argv)
    print(f"{'learner':<28}{'tokens/s (median)':>20}{'spread':>22}")
    print(f"{'1 process':<28}{median(one):>20.0f}{spread(one):>22}")
    print(f"{'2 DDP ranks (gloo, CPU)':<28}{median(two):>20.0f}{spread(two):>22}")
    emit(
        "ddp",
        "learner step, 2 gloo ranks",
        median(two),
        median(one),
        "1 process, full batch; 3 alternated rounds, steps pooled",
        "trained tokens/s",
        "higher",
        f"ours {spread(two)}, baseline {spread(one)}",
    )


if __name__ == "__main__":
    main()
