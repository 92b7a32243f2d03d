"""Judge expressions and the weighted sum."""

from __future__ import annotations

import json
import math

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.rewards.combine import JudgeSpec, parse_judge_spec, weighted_sum


@pytest.mark.parametrize(
    ("expr", "items"),
    [
        ("rule/f1", ((1.0, "rule/f1"),)),
        ("rule/f1 + 0.3*llm/turn", ((1.0, "rule/f1"), (0.3, "llm/turn"))),
        ("rule/exact_match - 0.1 * rule/format", ((1.0, "rule/exact_match"), (-0.1, "rule/format"))),
        ("-rule/format", ((-1.0, "rule/format"),)),
        ("2*prm/Qwen2.5-Math-PRM-7B + 1e-2*rule/f1", ((2.0, "prm/Qwen2.5-Math-PRM-7B"), (0.01, "rule/f1"))),
    ],
)
def test_parse_and_round_trip(expr: str, items: tuple[tuple[float, str], ...]) -> None:
    spec = parse_judge_spec(expr)
    assert spec.items == items
    again = parse_judge_spec(json.loads(json.dumps(str(spec))))
    assert again == spec


@pytest.mark.parametrize(
    "bad", ["", "   ", "rule/f1 +", "f1", "rule/f1 + rule/f1", "0.3**rule/f1", "rule/f1 +0.3*x/y", "nan*rule/f1"]
)
def test_bad_expressions(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_judge_spec(bad)


def test_weighted_sum() -> None:
    assert weighted_sum({"a": 1.0, "b": -0.25}) == 0.75
    with pytest.raises(ValueError, match="not finite"):
        weighted_sum({"a": math.inf})
    with pytest.raises(ValueError, match=r"'b' \(nan\)"):  # the message names the bad term
        weighted_sum({"a": 1.0, "b": math.nan})
    with pytest.raises(ValueError, match="sum"):  # finite terms whose sum overflows
        weighted_sum({"a": 1e308, "b": 1e308})
    assert isinstance(parse_judge_spec(JudgeSpec(((1.0, "rule/f1"),))), JudgeSpec)
