"""Reward shaping the trainer applies before advantages: outcome/process split, combination, overlong.

* :func:`declared_outcomes` takes the outcome terms from the envs' judges (each judge's kind,
  :func:`prm_gym.rewards.protocol.reward_kind`, reported by the env as ``reward_kinds``), never
  from a term's name;
* :func:`shaping_of` is the run's combination options, trainer configuration (``--shaping.*``:
  ``credit=min``, ``gate``, ``norm``, ``clip``; the older form, options after ``;`` in the judge
  expression given to the envs, is still read from the config with a DeprecationWarning);
* :func:`combined_returns` applies them per group with :func:`prm_gym.rewards.combine.combine_group`;
  the env itself scores turn by turn and cannot see the group, so these group/trajectory-level
  modes are the trainer's job.
* :func:`overlong_penalty` is DAPO's soft overlong punishment (Yu et al. 2025, *DAPO: An Open-Source
  LLM Reinforcement Learning System at Scale*, section 3.4), applied per turn.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace

from prm_gym.agents.rollout import Trajectory
from prm_gym.core.errors import ConfigError
from prm_gym.core.seams import RewardKind
from prm_gym.rewards.combine import CombineConfig, combine_group, normalize, parse_judge_spec
from prm_gym.training.config import LossConfig, TrainConfig


def declared_outcomes(loss: LossConfig, kinds: Mapping[str, Mapping[str, RewardKind]]) -> LossConfig:
    """``loss`` with ``outcome_terms`` set to the terms the envs' judges declare ``outcome``.

    Args:
        loss: the loss config; an ``outcome_terms`` other than the default and the declared terms
            is a user's override (deprecated: a DeprecationWarning) and is kept.
        kinds: per env id, its ``reward_kinds`` (:class:`prm_gym.core.seams.TrainableEnv`).

    Raises:
        ConfigError: the envs of a mixture declare one term outcome in one and process in another.
    """
    merged: dict[str, RewardKind] = {}
    seen: dict[str, str] = {}
    for env_id, env_kinds in kinds.items():
        for term, kind in env_kinds.items():
            if merged.setdefault(term, kind) != kind:
                raise ConfigError(
                    f"env: reward term {term!r} is {merged[term]} in {seen[term]} but {kind} in {env_id}; "
                    "the envs of a mixture must agree (give one judge another term, or train them apart)."
                )
            seen.setdefault(term, env_id)
    declared = tuple(term for term, kind in merged.items() if kind == "outcome")
    if loss.outcome_terms in (LossConfig().outcome_terms, declared):
        return replace(loss, outcome_terms=declared)
    warnings.warn(
        f"--loss.outcome-terms {' '.join(loss.outcome_terms)}: naming outcome terms is deprecated; the "
        f"judges declare their kind (here the outcome terms are {', '.join(declared) or 'none'}).",
        DeprecationWarning,
        stacklevel=2,
    )
    return loss


def shaping_of(cfg: TrainConfig) -> CombineConfig | None:
    """The run's combination options: ``--shaping.*``, or (deprecated) the options after ``;`` of the
    judge expressions the config gives the envs (``--judge``, ``judge`` in ``--env-kwargs``).

    Read from the config alone (no env is built for it); an env's own default expression carries none.

    Raises:
        ConfigError: both forms are given and differ, or the envs of a mixture give different options.
    """
    given = {e: str(cfg.env_kwargs_for(e).get("judge", "")) for e in cfg.env_ids}
    old = {e: parse_judge_spec(j).combine_config() for e, j in given.items() if j and ";" in j}
    if not old:
        return cfg.shaping if is_active(cfg.shaping) else None
    if len({repr(c) for c in old.values()}) > 1 or len(old) < len(given):
        shown = "; ".join(f"{e}: {old.get(e, CombineConfig())}" for e in given)
        raise ConfigError(
            f"env: the envs of a mixture must share their judge expressions' options after ';' ({shown}); "
            "give the options once as --shaping.* instead."
        )
    legacy = next(iter(old.values()))
    if is_active(cfg.shaping) and cfg.shaping != legacy:
        raise ConfigError(f"--shaping ({cfg.shaping}) and the judge expression's options ({legacy}) differ; keep one.")
    warnings.warn(
        "options after ';' in a judge expression (credit=, gate=, norm=, clip=) are deprecated; give them as "
        f"trainer configuration: {shaping_flags(legacy)}.",
        DeprecationWarning,
        stacklevel=2,
    )
    return legacy if is_active(legacy) else None


def shaping_flags(config: CombineConfig) -> str:
    """``config`` as ``train-agent`` flags (``--shaping.credit min --shaping.gate 0.5``)."""
    changed = {k: v for k, v in asdict(config).items() if v != asdict(CombineConfig())[k]}
    return " ".join(f"--shaping.{k.replace('_', '-')} {v}" for k, v in changed.items()) or "(none)"


def is_active(config: CombineConfig | None) -> bool:
    """True when ``config`` changes anything (any option other than the defaults)."""
    return config is not None and config != CombineConfig()


def combined_returns(
    outcomes: Sequence[float],
    process: Sequence[Sequence[float]],
    groups: Sequence[int],
    config: CombineConfig,
) -> tuple[list[float], list[list[float]]]:
    """The outcome returns and per-turn process rewards after ``config``'s combination, per group.

    :func:`combine_group` turns each group's per-turn process rewards and outcomes into one reward
    per turn (outcome mixed into the last turn). The trainer still needs the two parts apart (the
    outcome feeds group advantages, the process part the turn-level reward-to-go), so the mixed
    outcome (the outcome normalised over the group as ``config.norm`` says) is the new outcome
    return and the rest of each turn's combined reward is its process reward. Per trajectory the
    two parts sum to exactly what :func:`combine_group` returned.

    Args:
        outcomes: per trajectory, its outcome return.
        process: per trajectory, its per-turn process rewards.
        groups: per trajectory, its group index.
        config: the combination options.
    """
    new_out = list(map(float, outcomes))
    new_proc = [list(map(float, p)) for p in process]
    for g in sorted(set(groups)):
        idx = [i for i, x in enumerate(groups) if x == g]
        combined = combine_group([process[i] for i in idx], [outcomes[i] for i in idx], config)
        mixed = normalize([outcomes[i] for i in idx], config.norm)
        for i, rewards, m in zip(idx, combined, mixed, strict=True):
            if rewards:
                rewards[-1] -= m
            new_out[i], new_proc[i] = m, rewards
    return new_out, new_proc


def overlong_penalty(traj: Trajectory, max_new_tokens: int, buffer: int, penalty: float) -> float:
    """DAPO soft overlong punishment summed over the turns of ``traj`` (<= 0).

    A turn of ``L`` sampled tokens loses ``penalty * (L - (max_new_tokens - buffer)) / buffer``
    once ``L`` passes ``max_new_tokens - buffer``, so a turn cut off at ``max_new_tokens`` loses
    ``penalty`` and shorter turns lose nothing.

    Args:
        traj: the trajectory.
        max_new_tokens: the per-turn sampling limit.
        buffer: the length of the punishment interval (0: no penalty).
        penalty: the largest penalty per turn.
    """
    if buffer <= 0 or penalty == 0:
        return 0.0
    start = max_new_tokens - buffer
    total = 0.0
    for turn in traj.turns:
        over = (turn.end - turn.start) - start
        if over > 0:
            total -= penalty * min(over, buffer) / buffer
    return total
