"""Experiment trackers beyond TensorBoard: ``train-agent --report-to trackio wandb mlflow``.

Each tracker receives every ``metrics.jsonl`` row (the same keys, at the same step) and the run's
config once. The libraries are imported only when named, and a missing one is a one-line error
naming the extra (``pip install 'prm-gym[wandb]'``) before any rollout. Their own settings come
from their usual environment variables (``WANDB_MODE=offline``, ``MLFLOW_TRACKING_URI``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from prm_gym.core.extras import require

#: The trackers ``--report-to`` takes.
TRACKERS = ("trackio", "wandb", "mlflow")


class Tracker(Protocol):
    """What :class:`prm_gym.training.metrics.MetricsLog` calls on each tracker."""

    def log(self, step: int, values: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class _Trackio:
    def __init__(self, project: str, name: str, config: Mapping[str, Any]):
        self.lib = require("trackio", "trackio", "--report-to trackio")
        self.lib.init(project=project, name=name, config=dict(config))

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.lib.log(dict(values), step=step)

    def close(self) -> None:
        self.lib.finish()


class _Wandb:
    def __init__(self, project: str, name: str, config: Mapping[str, Any], out_dir: str):
        wandb = require("wandb", "wandb", "--report-to wandb")
        self.run = wandb.init(project=project, name=name, config=dict(config), dir=out_dir)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def close(self) -> None:
        self.run.finish()


_MLFLOW_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")


class _MLflow:
    """MLflow names may hold letters, digits and ``_ - . /`` and spaces: ``pass@4`` is logged as
    ``pass_at_4`` and ``success/env=prm/Math-v0`` as ``success/env_prm/Math-v0``."""

    def __init__(self, project: str, name: str, config: Mapping[str, Any]):
        self.lib = require("mlflow", "mlflow", "--report-to mlflow")
        self.lib.set_experiment(project)
        self.lib.start_run(run_name=name)
        self.lib.log_params({k: str(v)[:500] for k, v in _flat(config).items()})

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.lib.log_metrics({mlflow_name(k): float(v) for k, v in values.items()}, step=step)

    def close(self) -> None:
        self.lib.end_run()


def mlflow_name(key: str) -> str:
    """``key`` as MLflow accepts it (``pass@4`` -> ``pass_at_4``, other characters -> ``_``)."""
    return _MLFLOW_BAD.sub("_", key.replace("@", "_at_"))


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def open_trackers(names: tuple[str, ...], project: str, out_dir: str, config: Mapping[str, Any]) -> list[Tracker]:
    """One started tracker per name (the run is named after ``out_dir``'s folder).

    Raises:
        MissingExtraError: a tracker's library is not installed (the message names the extra).
    """
    name = Path(out_dir).resolve().name
    made: list[Tracker] = []
    for tracker in names:
        if tracker == "trackio":
            made.append(_Trackio(project, name, config))
        elif tracker == "wandb":
            made.append(_Wandb(project, name, config, out_dir))
        else:
            made.append(_MLflow(project, name, config))
    return made
