"""The multi-process learner: 2 CPU processes (torchrun, gloo) against one process on the full batch.

This file is also the script torchrun runs (``python test_ddp.py OUT`` under torchrun): each rank
takes one DDP learner step per scenario on a fixed synthetic batch, then trains two steps with
:func:`prm_gym.training.trainer.train` into ``OUT/run<rank>``. The test repeats the learner steps in its
own process, without DDP, and compares gradients and updated parameters.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from test_trainer import small  # the suite's small Math run (tests/training is on sys.path)

from prm_gym.agents.hf import HFPolicy
from prm_gym.core.models import tiny_model, tiny_tokenizer
from prm_gym.training.batch import Batch
from prm_gym.training.config import LossConfig, TrainConfig
from prm_gym.training.metrics import read_metrics
from prm_gym.training.update import learner_step

SCENARIOS: dict[str, LossConfig] = {
    "token_mean": LossConfig(micro_batch_size=2),
    "seq_mean_kl_two_updates": LossConfig(
        micro_batch_size=1, aggregation="seq-mean-token-mean", kl_coef=0.1, updates_per_batch=2, max_grad_norm=0.5
    ),
}


def make_batch(rows: int = 6, length: int = 14, vocab: int = 64) -> Batch:
    """A fixed batch: uneven loss masks, one row with none (skipped), random advantages."""
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(3, vocab, (rows, length), generator=gen)
    lengths = torch.tensor([14, 9, 12, 5, 14, 11])[:rows]
    attn = (torch.arange(length)[None, :] < lengths[:, None]).long()
    lmask = (torch.rand(rows, length, generator=gen) < 0.6).float() * attn
    lmask[:, :2] = 0
    lmask[3] = 0  # no sampled token: not trained
    blp = -torch.rand(rows, length, generator=gen) * 3
    adv = torch.randn(rows, length, generator=gen)
    return Batch(ids * attn, attn, lmask, blp, adv, torch.zeros(rows, dtype=torch.long), {})


def one_step(cfg: LossConfig, wrap: str = "") -> tuple[Any, dict[str, float]]:
    """One learner step from the same initial weights; ``wrap``: "ddp", "fsdp" or "" (none).

    With FSDP the step trains a sharded copy and the returned model is the replica it syncs into.
    """
    from torch.nn.parallel import DistributedDataParallel

    from prm_gym.training import fsdp

    model = tiny_model(len(tiny_tokenizer()), seed=0, hidden=32, layers=2)
    ref = tiny_model(len(tiny_tokenizer()), seed=1, hidden=32, layers=2).eval() if cfg.kl_coef > 0 else None
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    if wrap == "fsdp":
        sharded, sharded_opt = fsdp.shard(model, opt)
        stats = learner_step(sharded, sharded_opt, make_batch(), cfg, ref=ref)
        fsdp.sync_replica(sharded, sharded_opt, model, opt, moments=True)
        return model, stats
    stats = learner_step(DistributedDataParallel(model) if wrap == "ddp" else model, opt, make_batch(), cfg, ref=ref)
    return model, stats


def small_config(out: Path, **changes: Any) -> TrainConfig:
    """test_trainer's small run with two groups a step, one row a micro-batch, on the CPU (gloo,
    also on a machine with a GPU)."""
    changes = {"tasks_per_step": 2, "loss": LossConfig(micro_batch_size=1), "device": "cpu", **changes}
    return small(out, **changes)


def worker(out: Path) -> None:
    """What each torchrun rank runs."""
    import torch.distributed as dist

    from prm_gym.training.trainer import train

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for name, cfg in SCENARIOS.items():
        model, stats = one_step(cfg, "ddp")
        grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        torch.save({"params": model.state_dict(), "grads": grads, "stats": stats}, out / f"{name}.rank{rank}.pt")
        model, stats = one_step(cfg, "fsdp")
        torch.save({"params": model.state_dict(), "stats": stats}, out / f"{name}.fsdp{rank}.pt")
    run = train(small_config(out / f"run{rank}"))
    torch.save(run.policy.model.state_dict(), out / f"trained.rank{rank}.pt")
    sharded = small_config(out / "sharded", sharding="fsdp")  # one output dir, as in a real run
    run = train(sharded)
    torch.save(run.policy.model.state_dict(), out / f"sharded.rank{rank}.pt")
    train(dataclasses.replace(sharded, steps=3, resume=True))
    dist.barrier()
    del model, run
    gc.collect()  # the DDP and FSDP wrappers above hold the group: they go before it, not at exit
    dist.destroy_process_group()  # leave gloo before exit: tearing it down at exit can abort a rank
    # What this file tests is written by now. A rank can still abort in torch's own teardown at
    # interpreter exit ("terminate called without an active exception", pytorch/pytorch#179291), about
    # once in ten suite runs here, after every file above was written; end the rank without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_gloo_ranks_match_one_process_and_only_rank0_writes(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    cmd += ["--master-port", str(_free_port()), __file__, str(tmp_path)]
    # Its own session, so a timeout kills torchrun *and* its rank processes (no orphans).
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    for name, cfg in SCENARIOS.items():
        ref_model, ref_stats = one_step(cfg)
        for rank in (0, 1):
            got = torch.load(tmp_path / f"{name}.rank{rank}.pt")
            for k, p in ref_model.named_parameters():
                assert p.grad is not None
                torch.testing.assert_close(got["grads"][k], p.grad, atol=1e-5, rtol=1e-5, msg=f"{name} grad {k}")
            for k, v in ref_model.state_dict().items():
                torch.testing.assert_close(got["params"][k], v, atol=1e-5, rtol=1e-5, msg=f"{name} param {k}")
            for k, v in ref_stats.items():
                assert abs(got["stats"][k] - v) < 1e-5, (name, k, got["stats"][k], v)
            sharded = torch.load(tmp_path / f"{name}.fsdp{rank}.pt")  # FSDP: the same step, synced back
            for k, v in ref_model.state_dict().items():
                torch.testing.assert_close(sharded["params"][k], v, atol=1e-5, rtol=1e-5, msg=f"{name} fsdp {k}")
            for k, v in ref_stats.items():
                assert abs(sharded["stats"][k] - v) < 1e-5, (name, "fsdp", k, sharded["stats"][k], v)
        assert ref_stats["trained_rows"] == 5.0
    # the loop: rank 0 alone wrote metrics, checkpoints and plots; both ranks hold the same weights
    assert not (tmp_path / "run1").exists()
    rows = read_metrics(tmp_path / "run0")
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]
    assert (tmp_path / "run0" / "checkpoint.pt").exists()
    w0, w1 = (torch.load(tmp_path / f"trained.rank{r}.pt") for r in (0, 1))
    initial = HFPolicy.from_id("hf:tiny", seed=0).model.state_dict()
    assert any(not torch.equal(w0[k], initial[k]) for k in w0)
    for k in w0:
        torch.testing.assert_close(w0[k], w1[k], atol=0, rtol=0)
    # --sharding fsdp: both ranks' policies hold the same trained weights; rank 0's checkpoint has
    # full (not sharded) AdamW moments; --resume continued it to step 3.
    s0, s1 = (torch.load(tmp_path / f"sharded.rank{r}.pt") for r in (0, 1))
    assert any(not torch.equal(s0[k], initial[k]) for k in s0)
    for k in s0:
        torch.testing.assert_close(s0[k], s1[k], atol=0, rtol=0)
    assert [r["step"] for r in read_metrics(tmp_path / "sharded") if "loss" in r] == [1, 2, 3]
    saved = torch.load(tmp_path / "sharded" / "checkpoint.pt", weights_only=False)
    assert saved["step"] == 3
    moments = saved["optimizer"]["state"]
    shapes = [p.shape for p in HFPolicy.from_id("hf:tiny", seed=0).model.parameters()]
    assert [moments[i]["exp_avg"].shape for i in range(len(shapes))] == shapes


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
