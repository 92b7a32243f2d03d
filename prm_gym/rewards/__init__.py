"""Judges and process reward models, and how their scores become a reward.

Scorers are referenced by string id (``rule/math_equiv``, ``rule/f1``, ``llm/turn``, ...) and
composed with a small expression such as ``"rule/f1 + 0.3*llm/turn"``.
"""

from prm_gym.rewards.combine import JudgeSpec, parse_judge_spec
from prm_gym.rewards.protocol import AsyncJudge, Judge
from prm_gym.rewards.registry import available_judges, make_judge, register_judge
from prm_gym.rewards.types import Turn, Verdict

__all__ = [
    "AsyncJudge",
    "Judge",
    "JudgeSpec",
    "Turn",
    "Verdict",
    "available_judges",
    "make_judge",
    "parse_judge_spec",
    "register_judge",
]
