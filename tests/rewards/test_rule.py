"""Rule judges, the registry, and how failures become infra_error turns."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.core.tools import ToolResult
from prm_gym.rewards.registry import available_judges, make_judge, register_judge
from prm_gym.rewards.rule import math_equal, normalize_answer, token_f1
from prm_gym.rewards.testing import FakeJudge, failing
from prm_gym.rewards.types import Turn


def turn(action: str, gold: object, results: tuple[ToolResult, ...] = ()) -> Turn:
    parsed = parse_action(action)
    return Turn(Task("t", "q", gold), 0, action, parsed, results, (), parsed.answer is not None)


def score(judge_id: str, t: Turn) -> float:
    return make_judge(judge_id).score([t])[0].score  # type: ignore[union-attr]


def test_exact_match_and_f1() -> None:
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert score("rule/exact_match", turn("<answer>the eiffel tower</answer>", ["Eiffel Tower", "x"])) == 1.0
    assert score("rule/exact_match", turn("<answer>Paris</answer>", "Eiffel Tower")) == 0.0
    assert token_f1("Eiffel Tower", "the tower") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert score("rule/f1", turn("<answer>tower</answer>", ["eiffel tower", "tower"])) == 1.0


def test_math_equiv_and_format_and_tool() -> None:
    assert score("rule/math_equiv", turn("<answer>\\frac{6}{4}</answer>", "1.5")) == 1.0
    assert score("rule/math_equiv", turn("<answer>2</answer>", "1.5")) == 0.0
    assert score("rule/format", turn("<answer>1</answer>", "1")) == 0.0
    assert score("rule/format", turn("<answer>1", "1")) == -1.0
    results = (
        ToolResult("c", True, "1"),
        ToolResult("c", False, "bad"),
        ToolResult("c", False, "down", infra_error=True),
    )
    assert score("rule/tool", turn("x", "1", results)) == -0.5


def test_registry() -> None:
    assert {"rule/math_equiv", "rule/f1", "rule/format"} <= set(available_judges())
    with pytest.raises(ConfigError, match="Unknown judge id"):
        make_judge("rule/nope")
    with pytest.raises(ConfigError, match="already registered"):
        register_judge("rule/f1", lambda: FakeJudge())
    with pytest.raises(ConfigError, match="family/name"):
        register_judge("bad id", lambda: FakeJudge())
    register_judge("test/constant", lambda: FakeJudge("test/constant", lambda t: 0.5), overwrite=True)
    assert make_judge("test/constant").score([turn("x", 1)])[0].score == 0.5  # type: ignore[union-attr]


def test_judge_failure_is_infra_error_not_a_score() -> None:
    register_judge("test/down", lambda: FakeJudge("test/down", failing("HTTP 500")), overwrite=True)
    register_judge("test/nan", lambda: FakeJudge("test/nan", lambda t: float("nan")), overwrite=True)
    for jid in ("test/down", "test/nan"):
        env = gym.make("prm/Math-v0", judge=f"rule/math_equiv + 0.5*{jid}")
        env.reset(seed=0)
        answer = env.unwrapped.task.answer
        _, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
        assert terminated and info["reward_status"] == "infra_error"
        assert "error" in info["judge"][jid] and info["judge"]["rule/math_equiv"]["score"] == 1.0
        assert reward == 1.0 and info["reward_process"] == 0.0


def test_verdicts_are_memoised_across_forks() -> None:
    judge = FakeJudge("test/counting", lambda t: 0.25)
    register_judge("test/counting", lambda: judge, overwrite=True)
    env = gym.make("prm/Math-v0", judge="test/counting").unwrapped
    env.reset(seed=0)
    env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>')
    env.step("hmm")
    assert judge.calls == 2
    clone = env.fork()
    assert judge.calls == 2, "replay must reuse memoised verdicts"
    _, reward, *_ = clone.step("more")
    assert reward == 0.25 and judge.calls == 3


def test_plain_numbers_compare_exactly_without_math_verify() -> None:
    assert math_equal("42", "+42") and math_equal("-3", "-3.0") and math_equal("1000", "$1,000$")
    assert math_equal("7/2", "3.5") and math_equal("١٢", "12")  # unicode decimal digits, as int() reads them
    assert not math_equal("42", "43") and not math_equal("2", "2.000001")
    assert score("rule/math_equiv", turn("<answer>-17</answer>", -17)) == 1.0
    huge = "9" * 5000  # past int()'s 4300-digit limit: compared as canonical digit strings, not an error
    assert math_equal(huge, "0" + huge) and not math_equal("42", huge) and not math_equal("1" + "0" * 5000, huge)


def test_normalisation_strips_every_punctuation_mark_and_article() -> None:
    assert normalize_answer("A (big) 'deal', the end!?") == "big deal end"
    assert normalize_answer("An  apple—a day") == "apple— day"  # an em dash is not ASCII punctuation
    words = ("The", "Oslo", "1990", "an", "Ünïcode²")
    assert [normalize_answer(w) for w in words] == ["", "oslo", "1990", "", "ünïcode²"]


def _squad_normalise(text: str) -> str:
    """The normalisation spelled out, without normalize_answer's one-word fast path."""
    import re
    import string

    text = re.sub(r"\b(a|an|the)\b", " ", text.lower().translate(str.maketrans("", "", string.punctuation)))
    return " ".join(text.split())


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), st.sampled_from(["a", "An", "THE", "the end", "x_y", "Ǆ", "ǅa", "a1", "İ"])))
def test_one_word_fast_path_normalises_as_the_general_path(text: str) -> None:
    assert normalize_answer(text) == _squad_normalise(text)
