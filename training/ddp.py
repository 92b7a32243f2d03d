"""The learner on several devices: torch DistributedDataParallel under ``torchrun``.

``torchrun --nproc-per-node N -m training.cli ...`` (or ``torchrun ... $(which train-agent) ...``)
starts N copies of the same loop; :func:`setup_learner` sees ``WORLD_SIZE > 1`` in the
environment, joins the process group (NCCL on GPUs, gloo on CPUs), puts the model on
``cuda:LOCAL_RANK`` and wraps it in DDP. What each rank then does:

* rollouts: rank 0's trajectories of the step are broadcast (:meth:`Learner.broadcast`), so every
  rank builds the same :class:`training.batch.Batch` with the same advantages;
* the learner step: :func:`rank_chunks` gives each rank every ``world_size``-th trainable row,
  in micro-batches; each micro-batch's loss is weighted by ``world_size`` times its share of the
  *whole* batch (its tokens over all ranks' tokens for ``token-mean``), so DDP's gradient
  average equals the single-process gradient of the full batch. A rank with fewer micro-batches
  runs zero-weight ones, so every rank makes the same number of backward passes (collectives);
* logging, evaluation, checkpoints and plots happen on rank 0 only (:meth:`Learner.metrics_log`).

In one process :func:`setup_learner` returns a :class:`Learner` that changes nothing.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from envs.errors import ConfigError
from training.batch import Batch
from training.metrics import MetricsLog

T = TypeVar("T")


def world_size() -> int:
    """``WORLD_SIZE`` as set by torchrun (1 when absent)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


class NullLog:
    """A :class:`training.metrics.MetricsLog` that writes nothing (ranks other than 0)."""

    def log(self, step: int, values: Any) -> None:
        """Drop ``values``."""

    def close(self) -> None:
        """Nothing to close."""


@dataclass
class Learner:
    """What the loop needs to know about the learner's devices.

    Attributes:
        model: what :func:`training.trainer.learner_step` trains: the DDP wrapper, or the bare
            model in one process (the policy keeps the bare model for sampling and saving).
        rank, world_size: this process's place in the process group.
        device: where the model and each batch live.
        owns_group: :func:`setup_learner` started the process group, so :meth:`close` ends it.
    """

    model: Any
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

    def metrics_log(self, out_dir: str | Path, tensorboard: bool, keep_until: int | None) -> MetricsLog | NullLog:
        """A real metrics log on rank 0, a :class:`NullLog` on the others."""
        return MetricsLog(out_dir, tensorboard, keep_until=keep_until) if self.is_main else NullLog()

    def close(self) -> None:
        """Wait for every rank; then leave the process group if :func:`setup_learner` started it."""
        if self.world_size > 1 and dist.is_initialized():
            dist.barrier()
            if self.owns_group:
                dist.destroy_process_group()


def setup_learner(run: Any) -> Learner:
    """Join torchrun's process group when ``WORLD_SIZE > 1`` and wrap ``run.policy.model`` in DDP.

    Args:
        run: a :class:`training.trainer.Run` (its policy model and reference are moved to the
            rank's device).

    Raises:
        ConfigError: for asynchronous training, which the multi-process learner does not run.
    """
    world = world_size()
    if world <= 1:
        return Learner(run.policy.model)
    if run.cfg.asynchronous.enabled:
        raise ConfigError("asynchronous.enabled: torchrun (WORLD_SIZE > 1) trains synchronously; drop the flag.")
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    run.policy.model.to(device)
    if run.ref is not None:
        run.ref.to(device)
    for state in run.optimizer.state.values():  # resumed moments follow the parameters ("step" stays put)
        state.update({k: v.to(device) for k, v in state.items() if isinstance(v, torch.Tensor) and k != "step"})
    model = DistributedDataParallel(run.policy.model, device_ids=[local_rank] if cuda else None)
    return Learner(model, dist.get_rank(), dist.get_world_size(), device, owns_group=owns)


def _sharded(model: Any) -> bool:
    return isinstance(model, DistributedDataParallel) and dist.is_initialized() and dist.get_world_size() > 1


def rank_chunks(model: Any, rows: list[int], micro_batch_size: int) -> list[tuple[list[int], float]]:
    """This rank's micro-batches of ``rows`` with their loss weights.

    In one process (or for a model that is not DDP-wrapped): every row, weight 1. Under DDP:
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
    """Under DDP, the mean over ranks of each rank's ``world_size``-weighted stats; else ``stats``."""
    if not _sharded(model):
        return stats
    keys = sorted(stats)
    device = next(model.parameters()).device
    values = torch.tensor([stats[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    values /= dist.get_world_size()
    return {k: float(v) for k, v in zip(keys, values.tolist(), strict=True)}
