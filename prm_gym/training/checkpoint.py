"""Atomic checkpoints: everything needed to continue a run exactly.

A checkpoint holds the model and optimiser state, the step and policy version, the sampler's
RNG state and the config it was made with, as tensors, numbers, strings and containers only, so
``torch.load(..., weights_only=True)`` reads it. (The weights for other tools to load are exported
beside it: :mod:`prm_gym.training.model_export`.) It is written to a temporary file in the same
directory, flushed to disk and moved into place with :func:`os.replace`, so a crash never
leaves a half-written ``checkpoint.pt``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from prm_gym.core.errors import ConfigError

CHECKPOINT = "checkpoint.pt"


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` atomically to ``path`` (a file name, or a directory for checkpoint.pt)."""
    target = Path(path)
    if target.suffix != ".pt":
        target = target / CHECKPOINT
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ckpt-", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    for stale in target.parent.glob(".ckpt-*.tmp"):  # left by a process killed mid-save
        stale.unlink(missing_ok=True)
    return target


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint` (``path``: a file or a run directory)."""
    target = Path(path)
    if target.is_dir():
        target = target / CHECKPOINT
    if not target.exists():
        raise ConfigError(
            f"no checkpoint at {str(target)!r} (--resume reads the run's, --init-checkpoint the file named)."
        )
    # tensors, numbers, strings and containers only: loads without unpickling arbitrary objects
    try:
        state = torch.load(target, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ConfigError(
            f"{str(target)!r} is not a checkpoint torch can load with weights only: {exc}"[:400]
        ) from None
    if not isinstance(state, dict):
        raise ConfigError(f"{str(target)!r} holds a {type(state).__name__}, not a checkpoint or a state dict.")
    return state


def model_state(state: dict[str, Any]) -> dict[str, Any]:
    """The model weights in a checkpoint or a bare state dict."""
    inner = state.get("model")
    return inner if isinstance(inner, dict) else state
