"""Combination maths (PURE min-form, G-RA gate, ReNorm, clipping) and expression options."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prm_gym.core.errors import ConfigError
from prm_gym.rewards.combine import (
    CombineConfig,
    check_finite,
    clip,
    combine_group,
    gated,
    min_form_rewards,
    min_form_values,
    normalize,
    parse_judge_spec,
)

finite = st.floats(-100, 100, allow_nan=False)


def test_min_form_values_and_rewards() -> None:
    assert min_form_values([0.5, 0.9, 0.2, 0.7]) == [0.2, 0.2, 0.2, 0.7]
    assert min_form_rewards([0.5, 0.9, 0.2, 0.7]) == pytest.approx([0.0, 0.0, -0.5, 0.7])
    assert min_form_values([]) == []


@given(st.lists(finite, min_size=1, max_size=12))
def test_min_form_return_to_go_equals_value(process: list[float]) -> None:
    rewards, values = min_form_rewards(process), min_form_values(process)
    for t in range(len(process)):
        assert math.isclose(sum(rewards[t:]), values[t], abs_tol=1e-6)
        assert values[t] == min(process[t:])


def test_gated_accumulation() -> None:
    assert gated([0.3, 0.4], outcome=1.0, gate=0.5) == [0.3, 0.4]
    assert gated([0.3, 0.4], outcome=0.0, gate=0.5) == [0.0, 0.0]
    with pytest.raises(ValueError):
        gated([0.3], outcome=math.nan, gate=0.5)


def test_normalize_and_clip() -> None:
    assert normalize([1.0, 3.0]) == [-1.0, 1.0]
    assert normalize([2.0, 2.0]) == [0.0, 0.0]
    assert normalize([1.0, 2.0, 3.0], "minmax") == [0.0, 0.5, 1.0]
    assert clip([-5.0, 0.5, 5.0], -1.0, 1.0) == [-1.0, 0.5, 1.0]
    with pytest.raises(ValueError):
        check_finite([1.0, math.inf])
    with pytest.raises(ValueError):
        normalize([1.0], "bogus")


def test_combine_group_modes() -> None:
    process, outcomes = [[0.5, 0.2], [0.4, 0.6]], [1.0, 0.0]
    assert combine_group(process, outcomes) == [[0.5, 1.2], [0.4, 0.6]]
    gated_out = combine_group(process, outcomes, CombineConfig(gate=0.5))
    assert gated_out == [[0.5, 1.2], [0.0, 0.0]]
    pure = combine_group(process, outcomes, CombineConfig(credit="min"))
    assert pure[0] == pytest.approx([0.0, 1.2]) and pure[1] == pytest.approx([-0.2, 0.6])
    # ReNorm: a process scale of 100 no longer drowns the outcome once both are normalised
    renorm = combine_group([[100.0, 100.0], [100.0, 100.0]], outcomes, CombineConfig(norm="zscore"))
    assert renorm == [[0.0, 1.0], [0.0, -1.0]]
    clipped = combine_group([[0.0, 9.0], [-9.0]], [1.0, 0.0], CombineConfig(clip=1.5))
    assert clipped == [[0.0, 1.5], [-1.5]]


def test_expression_options_round_trip() -> None:
    expr = "rule/f1 + 0.3*llm/turn ; credit=min, gate=0.5, norm=zscore, clip=5"
    spec = parse_judge_spec(expr)
    assert spec.items == ((1.0, "rule/f1"), (0.3, "llm/turn"))
    assert spec.combine_config() == CombineConfig("min", 0.5, "zscore", 5.0)
    assert parse_judge_spec(json.loads(json.dumps(str(spec)))) == spec
    assert parse_judge_spec("rule/f1").combine_config() == CombineConfig()
    assert str(parse_judge_spec("rule/f1 + 0.3*llm/turn")) == "rule/f1 + 0.3*llm/turn"


@pytest.mark.parametrize(
    "bad", ["rule/f1 ; credit=max", "rule/f1 ; gate=x", "rule/f1 ; colour=red", " ; credit=min", "rule/f1 ; credit"]
)
def test_bad_options(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_judge_spec(bad)
