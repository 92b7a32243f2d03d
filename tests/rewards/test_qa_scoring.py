"""rule/exact_match and rule/f1 against the official SQuAD v1.1 and HotpotQA scripts' definitions."""

from __future__ import annotations

import re
import string
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.rule import hotpot_f1, normalize_answer, token_f1
from prm_gym.rewards.types import Turn


# ------------------------------------------------------------------ references, from the published scripts' definitions
def ref_normalize(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def ref_squad_f1(prediction: str, ground_truth: str) -> float:
    pred, gold = ref_normalize(prediction).split(), ref_normalize(ground_truth).split()
    num_same = sum((Counter(pred) & Counter(gold)).values())
    if num_same == 0:
        return 0.0
    precision, recall = num_same / len(pred), num_same / len(gold)
    return (2 * precision * recall) / (precision + recall)


def ref_hotpot_f1(prediction: str, ground_truth: str) -> float:
    pred, gold = ref_normalize(prediction), ref_normalize(ground_truth)
    if pred in ("yes", "no", "noanswer") and pred != gold:
        return 0.0
    if gold in ("yes", "no", "noanswer") and pred != gold:
        return 0.0
    return ref_squad_f1(prediction, ground_truth)


def ref_em(prediction: str, ground_truth: str) -> float:
    return float(ref_normalize(prediction) == ref_normalize(ground_truth))


WORDS = ["the", "a", "an", "The", "yes", "no", "noanswer", "Yes.", "paris", "Paris!", "x", "--", "", "1990", "é", "A.B"]
answers = st.one_of(st.text(max_size=30), st.lists(st.sampled_from(WORDS), max_size=5).map(" ".join))

EDGE = [
    ("", ""),
    ("the", "a"),
    ("!!!", "the"),
    ("the", "paris"),
    ("", "paris"),
    ("yes", "yes"),
    ("Yes!", "yes"),
    ("yes", "no"),
    ("yes", "yes sir"),
    ("noanswer", "no answer"),
    ("the eiffel tower", "eiffel tower paris"),
]


def _score(judge_id: str, answer: str, gold: object, **kwargs: object) -> float:
    parsed = parse_action(f"<answer>{answer}</answer>")
    t = Turn(Task("t", "q", gold), 0, "", parsed, (), (), True)
    return make_judge(judge_id, **kwargs).score([t])[0].score  # type: ignore[union-attr]


@pytest.mark.parametrize(("pred", "gold"), EDGE)
def test_edge_pairs_equal_the_official_scripts(pred: str, gold: str) -> None:
    assert abs(token_f1(gold, pred) - ref_squad_f1(pred, gold)) < 1e-9
    assert abs(hotpot_f1(gold, pred) - ref_hotpot_f1(pred, gold)) < 1e-9
    assert (normalize_answer(pred) == normalize_answer(gold)) == bool(ref_em(pred, gold))


def test_answers_that_normalise_to_nothing_score_zero_f1() -> None:
    assert token_f1("the", "a") == 0.0 and token_f1("", "") == 0.0 and token_f1("!!!", "paris") == 0.0


@settings(max_examples=500, deadline=None)
@given(answers, answers)
def test_f1_and_em_equal_the_official_scripts(pred: str, gold: str) -> None:
    assert abs(token_f1(gold, pred) - ref_squad_f1(pred, gold)) < 1e-9
    assert abs(hotpot_f1(gold, pred) - ref_hotpot_f1(pred, gold)) < 1e-9
    assert (normalize_answer(pred) == normalize_answer(gold)) == bool(ref_em(pred, gold))


@settings(max_examples=200, deadline=None)
@given(answers.filter(lambda a: "<" not in a and ">" not in a), st.lists(answers, min_size=1, max_size=3))
def test_judges_take_the_best_gold_like_the_official_scripts(pred: str, golds: list[str]) -> None:
    parsed = parse_action(f"<answer>{pred}</answer>").answer
    if parsed is None:
        return
    assert abs(_score("rule/f1", pred, golds) - max(ref_squad_f1(parsed, g) for g in golds)) < 1e-9
    hotpot = _score("rule/f1", pred, golds, mode="hotpotqa")
    assert abs(hotpot - max(ref_hotpot_f1(parsed, g) for g in golds)) < 1e-9
    assert _score("rule/exact_match", pred, golds) == max(ref_em(parsed, g) for g in golds)


def test_hotpot_mode_is_all_or_nothing_on_yes_no() -> None:
    assert _score("rule/f1", "yes it is", "yes", mode="hotpotqa") == 0.0
    assert _score("rule/f1", "yes it is", "yes") == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="mode"):
        make_judge("rule/f1", mode="trivia")
