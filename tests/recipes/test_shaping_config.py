"""Shaping options are trainer configuration (--shaping.*), read from the config alone; the outcome
terms come from the judges' declared kinds, not from term names."""

from __future__ import annotations

import warnings

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.rewards.combine import CombineConfig
from prm_gym.training.cli import parse
from prm_gym.training.config import LossConfig, TrainConfig
from prm_gym.training.shaping import declared_outcomes, shaping_of

NOWHERE = "nowhere/Unregistered-v0"  # shaping_of never builds an env: this id is not even registered


def test_shaping_flags_parse_into_the_trainer_config() -> None:
    cfg = parse(["--shaping.credit", "min", "--shaping.gate", "0.5", "--shaping.norm", "zscore"])
    assert cfg.shaping == CombineConfig(credit="min", gate=0.5, norm="zscore")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert shaping_of(cfg) == cfg.shaping
        assert shaping_of(TrainConfig()) is None
    with pytest.raises(SystemExit):  # tyro lists the choices
        parse(["--shaping.credit", "max"])
    with pytest.raises(ConfigError, match="credit must be 'sum' or 'min'"):
        CombineConfig(credit="max")  # type: ignore[arg-type]


def test_the_old_judge_string_form_still_works_with_a_deprecation_warning() -> None:
    cfg = TrainConfig(env=NOWHERE, judge="rule/f1 + 0.3*llm/turn ; credit=min, gate=0.5")
    with pytest.warns(DeprecationWarning, match="--shaping.credit min --shaping.gate 0.5"):
        assert shaping_of(cfg) == CombineConfig(credit="min", gate=0.5)
    kwargs = TrainConfig(env=NOWHERE, env_kwargs='{"judge": "rule/f1 ; norm=zscore"}')
    with pytest.warns(DeprecationWarning):
        assert shaping_of(kwargs) == CombineConfig(norm="zscore")
    same = TrainConfig(env=NOWHERE, judge="rule/f1 ; gate=1", shaping=CombineConfig(gate=1.0))
    with pytest.warns(DeprecationWarning):
        assert shaping_of(same) == CombineConfig(gate=1.0)
    clash = TrainConfig(env=NOWHERE, judge="rule/f1 ; gate=1", shaping=CombineConfig(credit="min"))
    with pytest.raises(ConfigError, match="differ; keep one"):
        shaping_of(clash)


def test_a_mixture_must_share_its_options() -> None:
    kw = '{"prm/Math-v0": {"judge": "rule/math_equiv ; gate=1"}, "prm/SQL-v0": {"judge": "rule/execution_match"}}'
    cfg = TrainConfig(env=("prm/Math-v0", "prm/SQL-v0"), env_kwargs=kw)
    with pytest.raises(ConfigError, match="must share"):
        shaping_of(cfg)


def test_outcome_terms_are_what_the_judges_declare() -> None:
    sql = {"outcome": "outcome", "syntax": "outcome", "schema": "outcome", "explore": "process", "format": "process"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = declared_outcomes(LossConfig(), {"prm/SQL-v0": sql})  # type: ignore[dict-item]
        assert loss.outcome_terms == ("outcome", "syntax", "schema")
        assert declared_outcomes(loss, {"prm/SQL-v0": sql}) == loss  # resolving again changes nothing
    with pytest.warns(DeprecationWarning, match="naming outcome terms is deprecated"):
        assert declared_outcomes(LossConfig(outcome_terms=("format",)), {"e": sql}).outcome_terms == ("format",)  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="'syntax' is outcome in a but process in b"):
        declared_outcomes(LossConfig(), {"a": {"syntax": "outcome"}, "b": {"syntax": "process"}})
