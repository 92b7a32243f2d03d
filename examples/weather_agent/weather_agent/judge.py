"""``weather/close``: partial credit for numeric answers near the gold value."""

from __future__ import annotations

import re

from prm_gym.rewards.protocol import TurnJudge
from prm_gym.rewards.types import Turn, Verdict


class CloseJudge(TurnJudge):
    """1 at the gold value, falling linearly to 0 at ``tolerance`` degrees away; 0 for no number.

    Args:
        tolerance: the distance at which the score reaches 0.
    """

    name = "weather/close"
    term = "outcome"
    scope = "final"

    def __init__(self, tolerance: float = 5.0):
        self.tolerance = tolerance

    def score_one(self, turn: Turn) -> Verdict:
        match = re.search(r"-?\d+(?:\.\d+)?", turn.answer or "")
        if match is None:
            return Verdict(0.0, detail="no number")
        gap = abs(float(match.group()) - float(turn.task.answer))
        return Verdict(max(0.0, 1.0 - gap / self.tolerance))
