"""Mixed-env runs: ``--env`` as a weighted list of env ids, and how each step draws its tasks.

``--env prm/Math-v0`` trains one env, as always. ``--env prm/Math-v0:0.5 --env prm/SQL-v0:0.3
--env prm/Search-v0:0.2`` trains a mixture: every task of a step is drawn from an env chosen by
weight (weights are normalised; without any, the envs share equally), then from that env's
training tasks; a GRPO group (or a task's trees) is always one task of one env.

``--env-kwargs`` (and ``--eval.env-kwargs``) is one JSON object: keys naming one of the run's env
ids hold that env's own keyword arguments; every other key goes to every env, e.g.
``'{"max_turns": 4, "prm/Math-v0": {"levels": [1, 2]}}'``.

This module imports no torch (the config uses it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prm_gym.core.errors import ConfigError


@dataclass(frozen=True)
class EnvShare:
    """One env of a run and its share of the tasks (the weights of a run sum to 1)."""

    env_id: str
    weight: float


def _split_weight(item: str) -> tuple[str, float | None]:
    """``"prm/Math-v0:0.5"`` -> ``("prm/Math-v0", 0.5)``; an id without a numeric tail keeps its
    colon (``module:prm/Math-v0`` is a gymnasium id) and has no weight."""
    head, sep, tail = item.rpartition(":")
    if not sep:
        return item, None
    try:
        return head, float(tail)
    except ValueError:
        return item, None


def parse_env_spec(spec: str | Sequence[str]) -> tuple[EnvShare, ...]:
    """The envs of ``--env`` with normalised weights.

    Raises:
        ConfigError: no env, an id without a namespace, a repeated id, a weight that is not a
            positive finite number, or weights given to some envs and not others.
    """
    items = [spec] if isinstance(spec, str) else list(spec)
    if not items:
        raise ConfigError("env is empty: give a registered id such as --env prm/Math-v0.")
    pairs = [_split_weight(str(item).strip()) for item in items]
    for env_id, weight in pairs:
        if "/" not in env_id:
            raise ConfigError(f"env={env_id!r} is invalid: give a registered id such as prm/Math-v0.")
        if weight is not None and not (math.isfinite(weight) and weight > 0):
            raise ConfigError(f"env={env_id}:{weight!r}: a weight must be a positive number, e.g. {env_id}:0.5.")
    ids = [e for e, _ in pairs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"env names {sorted({e for e in ids if ids.count(e) > 1})} twice: give each env once.")
    given = [w for _, w in pairs if w is not None]
    if given and len(given) != len(pairs):
        raise ConfigError(
            "env: give every env a weight (--env prm/Math-v0:0.7 --env prm/SQL-v0:0.3) or none (equal shares)."
        )
    raw = [w if w is not None else 1.0 for _, w in pairs]
    total = sum(raw)
    return tuple(EnvShare(e, w / total) for e, w in zip(ids, raw, strict=True))


def kwargs_per_env(kwargs: Mapping[str, Any], env_ids: Sequence[str], name: str) -> dict[str, dict[str, Any]]:
    """Each env's keyword arguments from one JSON object (``name`` is its flag, for errors): a key
    that names an env of the run holds that env's own arguments, laid over the keys shared by all.

    Raises:
        ConfigError: a key names an env id that is not in the run, or an env's entry is not an object.
    """
    shared = {k: v for k, v in kwargs.items() if "/" not in k}
    out = {e: dict(shared) for e in env_ids}
    for key, value in kwargs.items():
        if "/" not in key:
            continue
        if key not in out:
            raise ConfigError(
                f"{name}: key {key!r} names no env of this run ({', '.join(env_ids)}); per-env arguments go "
                'under the env id, e.g. \'{"prm/Math-v0": {"levels": [1]}}\'.'
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: {key!r} must map to a JSON object of keyword arguments, got {value!r}.")
        out[key].update(value)
    return out


Pick = tuple[str, str]
"""``(env id, task id)``."""

Chooser = Callable[[str, int, np.random.Generator], list[str]]
"""``choose(env_id, count, rng)``: ``count`` task ids of that env."""


def draw_tasks(rng: np.random.Generator, shares: Sequence[EnvShare], count: int, choose: Chooser) -> list[Pick]:
    """``count`` picks: each pick's env drawn by weight (no draw for a single env, so a one-env run
    consumes ``rng`` exactly as before mixtures existed), then each env's tasks from ``choose``."""
    if len(shares) == 1:
        env = shares[0].env_id
        return [(env, t) for t in choose(env, count, rng)]
    w = np.array([s.weight for s in shares], dtype=np.float64)
    order = [shares[int(i)].env_id for i in rng.choice(len(shares), size=count, p=w / w.sum())]
    chosen = {s.env_id: iter(choose(s.env_id, order.count(s.env_id), rng)) for s in shares if s.env_id in order}
    return [(env, next(chosen[env])) for env in order]


def uniform_chooser(train_ids: Mapping[str, Sequence[str]]) -> Chooser:
    """Tasks of an env uniformly, without replacement while the env has enough of them."""

    def choose(env: str, count: int, rng: np.random.Generator) -> list[str]:
        ids = train_ids[env]
        return [ids[int(p)] for p in rng.choice(len(ids), size=count, replace=len(ids) < count)]

    return choose


def task_key(env_id: str, task_id: str) -> str:
    """A task's key across the envs of a run (task ids are unique only within their env)."""
    return f"{env_id}::{task_id}"
