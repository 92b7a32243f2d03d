"""``--device`` of every study: one flag, resolved once by the trainer's own rule.

Each study (``learn``, ``compare``, ``demo``, ``reeval``, ``gpu_learn``) parses ``--device``
(``auto``, ``cpu``, ``cuda`` or ``cuda:N``; ``auto``: a GPU when torch sees one) and replaces it by
the device it names (``cpu``, ``cuda:0``) with :func:`prm_gym.training.ddp.resolve_device`, before
any phase starts. Every phase then uses that one name: its models are moved there right after
loading, and the GRPO runs get it as ``TrainConfig.device``. A device that is not there stops the
study at once with the :class:`prm_gym.core.errors.ConfigError`'s message (exit 2, no traceback).
"""

from __future__ import annotations

import argparse
import re

DEVICE_FLAG = "auto|cpu|cuda|cuda:N"


def add_device_flag(p: argparse.ArgumentParser, default: str | None = "auto") -> None:
    """Add ``--device`` to a study's parser."""
    p.add_argument(
        "--device",
        default=default,
        metavar=DEVICE_FLAG,
        help="where every phase runs (SFT, RFT, GRPO and every evaluation): auto (a GPU when torch sees one), "
        "cpu, cuda or cuda:N",
    )


def resolve_device_flag(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Replace ``args.device`` by the device it names (``cpu``, ``cuda:0``), or stop the study with
    the reason (:meth:`argparse.ArgumentParser.error`: the message and exit status 2)."""
    from prm_gym.core.errors import ConfigError
    from prm_gym.training.config import DEVICE_PATTERN
    from prm_gym.training.ddp import resolve_device

    if re.fullmatch(DEVICE_PATTERN, args.device) is None:
        p.error(f"device: {args.device!r} is not a device; use auto, cpu, cuda or cuda:N.")
    try:
        args.device = str(resolve_device(args.device))
    except ConfigError as e:
        p.error(str(e))


def model_device(model: object) -> str:
    """Where ``model``'s weights are (``cpu``, ``cuda:0``): what a study records for each phase."""
    import torch

    assert isinstance(model, torch.nn.Module)
    return str(next(model.parameters()).device)
