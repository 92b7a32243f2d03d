"""The learner's devices: one device (CPU or a GPU), or several under ``torchrun`` (DDP or FSDP).

In one process :func:`setup_learner` puts the policy on ``--device`` (``auto``: the first GPU when
there is one) and trains it there. ``torchrun --nproc-per-node N -m prm_gym.training.cli ...`` (or
``torchrun ... $(which train-agent) ...``) starts N copies of the same loop; :func:`setup_learner`
sees torchrun's environment, joins the process group (NCCL on GPUs, gloo on CPUs), puts the
model on ``cuda:LOCAL_RANK`` (or the CPU) and wraps it in DDP, or, with ``--sharding fsdp``,
trains a sharded copy (:mod:`prm_gym.training.fsdp`). What each rank then does:

* rollouts: rank 0's trajectories of the step are broadcast (:meth:`Learner.broadcast`), so every
  rank builds the same :class:`prm_gym.training.batch.Batch` with the same advantages;
* the learner step: :func:`rank_chunks` gives each rank every ``world_size``-th trainable row,
  in micro-batches; each micro-batch's loss is weighted by ``world_size`` times its share of the
  *whole* batch (its tokens over all ranks' tokens for ``token-mean``), so the gradient average
  over ranks equals the single-process gradient of the full batch. A rank with fewer
  micro-batches runs zero-weight ones, so every rank makes the same number of backward passes;
* after the step, :meth:`Learner.after_step` brings FSDP's trained weights back into the policy
  (a no-op for DDP, whose wrapper trains the policy's own parameters);
* logging, evaluation, checkpoints and plots happen on rank 0 only (:meth:`Learner.metrics_log`).
"""

from __future__ import annotations

import dataclasses
import gc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from prm_gym.core.errors import ConfigError
from prm_gym.core.models import auto_device
from prm_gym.training import fsdp
from prm_gym.training.batch import Batch
from prm_gym.training.metrics import MetricsLog

T = TypeVar("T")


def world_size() -> int:
    """``WORLD_SIZE`` as set by torchrun (1 when absent)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def under_torchrun() -> bool:
    """True when torchrun (or another launcher) set the process-group environment."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``--device``: ``auto`` (a GPU when there is one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.

    Under torchrun ``cuda`` means this rank's GPU, ``cuda:LOCAL_RANK``.

    Raises:
        ConfigError: a GPU was asked for and torch sees none, or fewer than its index needs.
    """
    if name == "auto":
        name = auto_device()
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {name!r} was asked for but torch sees no GPU; use --device cpu or auto.")
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(
            f"device: {name!r} was asked for but torch sees {torch.cuda.device_count()} GPU(s); "
            "use --device cuda:0 or auto."
        )
    return device


class NullLog:
    """A :class:`prm_gym.training.metrics.MetricsLog` that writes nothing (ranks other than 0)."""

    def log(self, step: int, values: Any) -> None:
        """Drop ``values``."""

    def close(self) -> None:
        """Nothing to close."""


@dataclass
class Learner:
    """What the loop needs to know about the learner's devices.

    Attributes:
        model: what :func:`prm_gym.training.trainer.learner_step` trains: the DDP wrapper, the FSDP
            sharded copy, or the bare model in one process (the policy keeps the bare model for
            sampling and saving).
        optimizer: the optimiser that steps :attr:`model` (FSDP: over its shards; else the run's).
        rank, world_size: this process's place in the process group.
        device: where the model and each batch live.
        owns_group: :func:`setup_learner` started the process group, so :meth:`close` ends it.
    """

    model: Any
    optimizer: Any
    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that logs, evaluates and writes files."""
        return self.rank == 0

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank (picklable objects; identity in one process)."""
        if self.world_size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def to_device(self, batch: Batch) -> Batch:
        """``batch`` with its tensors on :attr:`device`."""
        if self.device.type == "cpu":
            return batch
        moved = {
            f.name: getattr(batch, f.name).to(self.device)
            for f in dataclasses.fields(batch)
            if isinstance(getattr(batch, f.name), torch.Tensor)
        }
        return dataclasses.replace(batch, **moved)

    def metrics_log(
        self, out_dir: str | Path, tensorboard: bool, keep_until: int | None, trackers: Any = None
    ) -> MetricsLog | NullLog:
        """A real metrics log on rank 0 (with the experiment trackers ``trackers()`` starts), a
        :class:`NullLog` on the others."""
        if not self.is_main:
            return NullLog()
        return MetricsLog(out_dir, tensorboard, keep_until=keep_until, trackers=trackers() if trackers else ())

    def after_step(self, run: Any, *, checkpoint_due: bool) -> None:
        """After a learner step (every rank): FSDP's weights back into ``run.policy.model``, and
        with ``checkpoint_due`` its optimiser moments into ``run.optimizer`` (what is saved)."""
        if fsdp.is_sharded(self.model):
            fsdp.sync_replica(self.model, self.optimizer, run.policy.model, run.optimizer, moments=checkpoint_due)

    def close(self) -> None:
        """Wait for every rank, drop the DDP or FSDP wrapper and its optimiser (the run keeps the bare
        model and its own optimiser), then leave the process group if :func:`setup_learner` started
        it. Both hold the group, so without this gloo's worker threads could be torn down during
        interpreter exit, which can abort a rank after its work is done (pytorch/pytorch#179291)."""
        if self.world_size > 1 and dist.is_initialized():
            dist.barrier()
            self.model = self.optimizer = None  # FSDP's optimiser holds the sharded parameters, and so the group
            gc.collect()  # a wrapper in a reference cycle goes now, not at exit
            if self.owns_group:
                dist.destroy_process_group()


def _move(run: Any, device: torch.device) -> None:
    """The policy, the reference and any resumed optimiser moments onto ``device``."""
    run.policy.model.to(device)
    if run.ref is not None:
        run.ref.to(device)
    for state in run.optimizer.state.values():  # resumed moments follow the parameters ("step" stays put)
        state.update({k: v.to(device) for k, v in state.items() if isinstance(v, torch.Tensor) and k != "step"})


def setup_learner(run: Any) -> Learner:
    """Put the learner on its device(s): one device, or torchrun's process group with DDP or FSDP.

    Args:
        run: a :class:`prm_gym.training.trainer.Run` (its policy model, reference and optimiser state
            are moved to the rank's device).

    Raises:
        ConfigError: a GPU was asked for and none is there; asynchronous training under torchrun.
    """
    cfg = run.cfg
    if not under_torchrun():
        device = resolve_device(cfg.device)
        _move(run, device)
        return Learner(run.policy.model, run.optimizer, device=device)
    if cfg.asynchronous.enabled:
        raise ConfigError("asynchronous.enabled: torchrun trains synchronously; drop the flag.")
    if cfg.sharding == "fsdp" and cfg.lora.rank:
        raise ConfigError("lora.rank: FSDP does not shard LoRA models here; use --sharding ddp (adapters are small).")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(cfg.device, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    _move(run, device)
    rank, world = dist.get_rank(), dist.get_world_size()
    if cfg.sharding == "fsdp":
        if cfg.lora.rank:
            raise ConfigError(
                "lora.rank: FSDP does not shard LoRA models here; use --sharding ddp (the adapters are small)."
            )
        model, optimizer = fsdp.shard(run.policy.model, run.optimizer)
        return Learner(model, optimizer, rank, world, device, owns_group=owns)
    ids = [device.index] if device.type == "cuda" else None
    return Learner(DistributedDataParallel(run.policy.model, device_ids=ids), run.optimizer, rank, world, device, owns)


def _sharded(model: Any) -> bool:
    wrapped = isinstance(model, DistributedDataParallel) or fsdp.is_sharded(model)
    return wrapped and dist.is_initialized() and dist.get_world_size() > 1


def rank_chunks(model: Any, rows: list[int], micro_batch_size: int) -> list[tuple[list[int], float]]:
    """This rank's micro-batches of ``rows`` with their loss weights.

    In one process (or for a model that is neither DDP-wrapped nor FSDP-sharded): every row, weight 1. Under DDP:
    rows ``rank, rank + W, ...`` with weight ``W`` (undoing DDP's gradient average), padded with
    zero-weight copies of the first row up to the largest rank's micro-batch count (rank 0
    never needs padding, so a padding chunk never shares its first row with a real one).
    """
    if not _sharded(model):
        return [(rows[i : i + micro_batch_size], 1.0) for i in range(0, len(rows), micro_batch_size)]
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = rows[rank::world]
    chunks = [(mine[i : i + micro_batch_size], float(world)) for i in range(0, len(mine), micro_batch_size)]
    most = -(-len(rows[0::world]) // micro_batch_size)
    return chunks + [([rows[0]], 0.0)] * (most - len(chunks))


def reduce_stats(model: Any, stats: dict[str, float]) -> dict[str, float]:
    """Under DDP or FSDP, the mean over ranks of each rank's ``world_size``-weighted stats; else ``stats``."""
    if not _sharded(model):
        return stats
    keys = sorted(stats)
    device = next(model.parameters()).device
    values = torch.tensor([stats[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    values /= dist.get_world_size()
    return {k: float(v) for k, v in zip(keys, values.tolist(), strict=True)}
