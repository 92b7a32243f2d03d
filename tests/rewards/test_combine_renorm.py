"""PPR's ReNorm (arXiv 2509.25598): r_t = process_t + outcome - 1, apart from the z-score option."""

from __future__ import annotations

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.rewards.combine import CombineConfig, combine_group, normalize, parse_judge_spec, renorm


def test_renorm_is_process_plus_outcome_minus_one() -> None:
    """The worked example of docs/judges.md."""
    assert renorm([0.8, 0.6], 1.0) == pytest.approx([0.8, 0.6])
    assert renorm([0.9, 0.4], 0.0) == pytest.approx([-0.1, -0.6])


def test_combine_group_with_renorm_is_not_a_zscore() -> None:
    process, outcomes = [[0.8, 0.6], [0.9, 0.4]], [1.0, 0.0]
    got = combine_group(process, outcomes, CombineConfig(norm="renorm"))
    assert got[0] == pytest.approx([0.8, 0.6]) and got[1] == pytest.approx([-0.1, -0.6])
    # every step of the failed trajectory is below every step of the successful one
    assert max(got[1]) < min(got[0])
    # z-score stays its own option and gives something else
    z = combine_group(process, outcomes, CombineConfig(norm="zscore"))
    assert z[1] != pytest.approx(got[1])


def test_renorm_option_round_trips_and_composes() -> None:
    spec = parse_judge_spec("rule/math_equiv + 0.5*llm/turn ; norm=renorm, credit=min")
    cfg = spec.combine_config()
    assert cfg.norm == "renorm" and str(parse_judge_spec(str(spec))) == str(spec)
    # min-form credit on the renormalised rewards: values min(-0.1, -0.6) = -0.6, then -0.6
    assert combine_group([[0.9, 0.4]], [0.0], cfg) == [pytest.approx([0.0, -0.6])]
    # the outcome is not rescaled over the group (it is inside every turn instead)
    assert normalize([1.0, 0.0, 1.0], "renorm") == [1.0, 0.0, 1.0]


def test_renorm_rejects_rewards_off_its_scale() -> None:
    with pytest.raises(ValueError, match=r"process\[1\] is 2.0"):
        renorm([0.5, 2.0], 1.0)
    with pytest.raises(ValueError, match="outcome"):
        renorm([0.5], -1.0)
    with pytest.raises(ConfigError, match="renorm"):
        CombineConfig(norm="re-norm")
