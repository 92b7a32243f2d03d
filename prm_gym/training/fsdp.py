"""The learner sharded with FSDP (torch's ``fully_shard``), for models whose optimiser does not fit.

``torchrun ... train-agent --sharding fsdp`` trains a *sharded copy* of the policy: each rank
keeps 1/N of the parameters, gradients and AdamW moments (about 12 of the 16 bytes a parameter
costs in fp32 AdamW), and the forward and backward passes gather layers on the fly. The policy
itself (``run.policy.model``, the *replica*) stays whole: rank 0 samples episodes from it,
evaluates it and saves it, exactly as in one process. After every learner step
:func:`sync_replica` gathers the trained weights into the replica (every rank takes part; the
replica is what ``--policy vllm:`` servers reload from too). Before a checkpoint it also gathers
the optimiser's moments into the replica's optimiser, so checkpoints keep the one-process format
and ``--resume`` works across ``--sharding`` settings and world sizes.

Gradient averaging over ranks is FSDP's reduce-scatter mean, the same as DDP's all-reduce mean,
so :func:`prm_gym.training.ddp.rank_chunks` weights micro-batches the same way for both.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard

_FULL = StateDictOptions(full_state_dict=True)  # every rank gets the whole state (on its device)


def _blocks(model: Any) -> list[torch.nn.Module]:
    """The repeated decoder blocks to shard one by one (any ``ModuleList`` of the model)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return [block for ml in lists for block in ml]


def shard(replica: Any, optimizer: torch.optim.Optimizer) -> tuple[Any, torch.optim.Optimizer]:
    """A sharded copy of ``replica`` and a fresh optimiser of ``optimizer``'s kind over it.

    ``optimizer``'s state (resumed moments, hyper-parameters) is carried over, so a run resumed
    from a one-process checkpoint continues exactly. Call on every rank of the process group.
    """
    model = copy.deepcopy(replica)
    for block in _blocks(model):
        fully_shard(block)
    fully_shard(model)
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    if len(groups) != 1:
        raise ValueError("FSDP sharding supports one optimiser parameter group.")
    kind: Any = type(optimizer)
    sharded_opt = kind(model.parameters(), lr=groups[0]["lr"])
    sharded_opt.param_groups[0].update(groups[0])
    if optimizer.state:
        set_optimizer_state_dict(model, sharded_opt, optim_state_dict=_by_name(replica, optimizer), options=_FULL)
    return model, sharded_opt


def _names(replica: Any, optimizer: torch.optim.Optimizer) -> list[str]:
    """The parameter name of each of ``optimizer``'s parameters, in its own (index) order."""
    by_id = {id(p): n for n, p in replica.named_parameters()}
    return [by_id[id(p)] for g in optimizer.param_groups for p in g["params"]]


def _by_name(replica: Any, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` keyed by parameter name (the form FSDP's loader takes)."""
    names = _names(replica, optimizer)
    plain = optimizer.state_dict()
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in plain["param_groups"]]
    return {"state": {names[i]: st for i, st in plain["state"].items()}, "param_groups": groups}


def _load_by_name(replica: Any, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a name-keyed full optimiser state into ``optimizer`` (over ``replica``'s parameters)."""
    index = {n: i for i, n in enumerate(_names(replica, optimizer))}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]]
    optimizer.load_state_dict({"state": {index[n]: st for n, st in state["state"].items()}, "param_groups": groups})


def is_sharded(model: Any) -> bool:
    """True for a model wrapped by :func:`shard`."""
    return isinstance(model, FSDPModule)


def sync_replica(
    model: Any,
    optimizer: torch.optim.Optimizer,
    replica: Any,
    replica_optimizer: torch.optim.Optimizer,
    *,
    moments: bool,
) -> None:
    """Copy the sharded ``model``'s full weights into ``replica`` (and, with ``moments``, the
    sharded optimiser's full state into ``replica_optimizer``). Collective: every rank calls it."""
    weights = get_model_state_dict(model, options=_FULL)
    with torch.no_grad():
        replica.load_state_dict(weights)
    if moments:
        _load_by_name(replica, replica_optimizer, get_optimizer_state_dict(model, optimizer, options=_FULL))


def scalar(value: Any) -> float:
    """A Python float of a tensor that may be a DTensor (e.g. FSDP's total gradient norm)."""
    full = value.full_tensor() if hasattr(value, "full_tensor") else value
    return float(full)
