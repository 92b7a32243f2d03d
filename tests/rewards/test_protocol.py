"""turn_scorer: envs score one turn through a judge's own score_one only when that is what its batch
method would do."""

from __future__ import annotations

from collections.abc import Sequence

from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards.protocol import TurnJudge, turn_scorer
from prm_gym.rewards.rule import ExactMatchJudge
from prm_gym.rewards.testing import FakeJudge
from prm_gym.rewards.types import Turn, Verdict

TURN = Turn(Task("t", "q", "Oslo"), 0, "<answer>Oslo</answer>", parse_action("<answer>Oslo</answer>"), final=True)


class Counting(TurnJudge):
    name = "test/counting"

    def __init__(self) -> None:
        self.one = self.batch = 0

    def score_one(self, turn: Turn) -> Verdict:
        self.one += 1
        return Verdict(0.25)


class BatchOverride(Counting):
    """A subclass that scores batches its own way: the batch method must be the one used."""

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        self.batch += 1
        return [Verdict(0.75) for _ in turns]


def test_plain_turn_judge_is_scored_through_score_one() -> None:
    judge = Counting()
    assert turn_scorer(judge) == judge.score_one
    assert turn_scorer(judge)(TURN).score == 0.25 and judge.one == 1
    assert turn_scorer(ExactMatchJudge())(TURN).score == 1.0


def test_overridden_batch_method_and_other_judges_go_through_the_batch() -> None:
    judge = BatchOverride()
    assert turn_scorer(judge)(TURN).score == 0.75
    assert (judge.batch, judge.one) == (1, 0)
    assert turn_scorer(FakeJudge("test/fake", lambda t: 0.5))(TURN).score == 0.5


def test_a_batch_method_patched_on_the_instance_is_used() -> None:
    judge = Counting()
    judge.score = lambda turns: [Verdict(0.5) for _ in turns]  # type: ignore[method-assign]
    assert turn_scorer(judge)(TURN).score == 0.5 and judge.one == 0
