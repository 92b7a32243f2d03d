"""PPR's ReNorm (arXiv 2509.25598) as the authors apply it: every step but the answering one gets
``process + outcome - beta`` (beta = 1), the answering turn the outcome; apart from the z-score."""

from __future__ import annotations

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.rewards.combine import CombineConfig, combine_group, normalize, parse_judge_spec, renorm
from prm_gym.training.shaping import combined_returns


def test_renorm_worked_example() -> None:
    """The worked example of docs/judges.md. Three turns, the last one answers; its process reward
    (0.5, 0.7) is not used: the paper's PPRM judges the steps, the outcome verifier the answer.

    Right trajectory: steps 0.8 + 1 - 1 = 0.8 and 0.6 + 1 - 1 = 0.6, answer 1.
    Wrong trajectory: steps 0.9 + 0 - 1 = -0.1 and 0.4 + 0 - 1 = -0.6, answer 0.
    (The old formula, process + outcome - 1 on every turn, gave [0.8, 0.6, 0.5] and
    [-0.1, -0.6, -0.3].)
    """
    assert renorm([0.8, 0.6, 0.5], 1.0) == pytest.approx([0.8, 0.6, 1.0])
    assert renorm([0.9, 0.4, 0.7], 0.0) == pytest.approx([-0.1, -0.6, 0.0])
    assert renorm([0.3], 1.0) == [1.0]  # answered at once: the outcome alone
    assert renorm([], 1.0) == []


def test_renorm_beta_is_the_shift() -> None:
    # beta = 0.5: steps 0.8 + 1 - 0.5 = 1.3, 0.9 + 0 - 0.5 = 0.4; answering turns keep the outcome
    assert renorm([0.8, 0.2], 1.0, beta=0.5) == pytest.approx([1.3, 1.0])
    assert renorm([0.9, 0.2], 0.0, beta=0.5) == pytest.approx([0.4, 0.0])
    cfg = parse_judge_spec("rule/f1 + llm/turn ; norm=renorm, renorm_beta=0.5").combine_config()
    assert cfg.renorm_beta == 0.5
    assert combine_group([[0.8, 0.2]], [1.0], cfg) == [pytest.approx([1.3, 1.0])]
    with pytest.raises(ConfigError, match="only applies with norm=renorm"):
        parse_judge_spec("rule/f1 + llm/turn ; renorm_beta=0.5")
    with pytest.raises(ConfigError, match="renorm_beta"):
        parse_judge_spec("rule/f1 + llm/turn ; norm=renorm, renorm_beta=x")


def test_combine_group_with_renorm_is_not_a_zscore() -> None:
    process, outcomes = [[0.8, 0.6, 0.5], [0.9, 0.4, 0.7]], [1.0, 0.0]
    got = combine_group(process, outcomes, CombineConfig(norm="renorm"))
    assert got[0] == pytest.approx([0.8, 0.6, 1.0]) and got[1] == pytest.approx([-0.1, -0.6, 0.0])
    # every step of the failed trajectory is below every step of the successful one
    assert max(got[1][:-1]) < min(got[0][:-1])
    # z-score stays its own option and gives something else
    z = combine_group(process, outcomes, CombineConfig(norm="zscore"))
    assert z[1] != pytest.approx(got[1])


def test_trainer_split_pays_the_outcome_on_the_answering_turn() -> None:
    """training/shaping.py splits combine_group's rewards into an outcome return and process rewards."""
    process, outcomes = [[0.8, 0.6, 0.5], [0.9, 0.4, 0.7]], [1.0, 0.0]
    out, proc = combined_returns(outcomes, process, [0, 0], CombineConfig(norm="renorm"))
    assert out == [1.0, 0.0]
    assert proc[0] == pytest.approx([0.8, 0.6, 0.0]) and proc[1] == pytest.approx([-0.1, -0.6, 0.0])


def test_renorm_option_round_trips_and_composes() -> None:
    spec = parse_judge_spec("rule/math_equiv + 0.5*llm/turn ; norm=renorm, credit=min")
    cfg = spec.combine_config()
    assert cfg.norm == "renorm" and str(parse_judge_spec(str(spec))) == str(spec)
    # min-form credit on the renormalised steps: values min(-0.1, -0.6) = -0.6, then -0.6; answer 0
    assert combine_group([[0.9, 0.4, 0.7]], [0.0], cfg) == [pytest.approx([0.0, -0.6, 0.0])]
    # a gate zeroes the steps of a failed trajectory; the answering turn keeps its outcome
    gated = CombineConfig(norm="renorm", gate=0.5)
    assert combine_group([[0.9, 0.4, 0.7], [0.8, 0.6, 0.1]], [0.0, 1.0], gated) == [
        pytest.approx([0.0, 0.0, 0.0]),
        pytest.approx([0.8, 0.6, 1.0]),
    ]
    # the outcome is not rescaled over the group (it is paid as it is on the answering turn)
    assert normalize([1.0, 0.0, 1.0], "renorm") == [1.0, 0.0, 1.0]


def test_renorm_rejects_rewards_off_its_scale() -> None:
    with pytest.raises(ValueError, match=r"process\[1\] is 2.0"):
        renorm([0.5, 2.0, 0.1], 1.0)
    with pytest.raises(ValueError, match="outcome"):
        renorm([0.5], -1.0)
    with pytest.raises(ConfigError, match="renorm"):
        CombineConfig(norm="re-norm")
