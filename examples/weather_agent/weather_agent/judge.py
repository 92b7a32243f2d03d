"""``weather/close``: partial credit for numeric answers near the gold value."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rewards.types import Turn, Verdict


class CloseJudge:
    """1 at the gold value, falling linearly to 0 at ``tolerance`` degrees away; 0 for no number.

    Args:
        tolerance: the distance at which the score reaches 0.
    """

    name = "weather/close"
    term = "outcome"
    scope = "final"

    def __init__(self, tolerance: float = 5.0):
        self.tolerance = tolerance

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        out = []
        for turn in turns:
            match = re.search(r"-?\d+(?:\.\d+)?", turn.answer or "")
            if match is None:
                out.append(Verdict(0.0, detail="no number"))
                continue
            gap = abs(float(match.group()) - float(turn.task.answer))
            out.append(Verdict(max(0.0, 1.0 - gap / self.tolerance)))
        return out
