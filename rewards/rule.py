"""Rule verifiers: deterministic, local judges.

=====================  =======  ======  ==========================================
id                     term     scope   score
=====================  =======  ======  ==========================================
``rule/math_equiv``    outcome  final   1.0 if the answer equals the gold (math-verify), else 0.0
``rule/exact_match``   outcome  final   1.0 if the normalised answer equals a gold answer
``rule/f1``            outcome  final   best SQuAD token F1 against the gold answers, in [0, 1]
``rule/format``        format   turn    0.0 if the turn parsed cleanly, -1.0 otherwise
``rule/tool``          tool     turn    minus the fraction of this turn's tool calls that failed
                                        through the agent's fault, in [-1, 0]
=====================  =======  ======  ==========================================
"""

from __future__ import annotations

import logging
import re
import string
import unicodedata
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from fractions import Fraction
from functools import lru_cache
from typing import Any

from prm_gym.core.errors import JudgeError
from prm_gym.rewards.protocol import TurnJudge
from prm_gym.rewards.types import Turn, Verdict

logging.getLogger("math_verify").setLevel(logging.ERROR)

# math-verify's own timeouts use SIGALRM, which only works on the main thread. We disable them
# and bound the call with a worker thread instead, so verification works from any thread.
_VERIFY_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="math-verify")


_NUMBER_RE = re.compile(r"[-+]?\d+(?:\.\d+)?|[-+]?\d+/\d+")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = ("a", "an", "the")
_ARTICLES_RE = re.compile(rf"\b({'|'.join(_ARTICLES)})\b")


def _integer(s: str) -> int | str:
    """The integer ``s`` spells (digits with an optional sign). One too long for ``int()`` (over
    ``sys.get_int_max_str_digits()`` digits) comes back as its canonical spelling: ASCII digits,
    no leading zeros, ``-`` kept."""
    try:
        return int(s)
    except ValueError:
        sign, digits = ("-", s[1:]) if s[:1] == "-" else ("", s.lstrip("+"))
        canonical = "".join(str(unicodedata.decimal(c)) for c in digits).lstrip("0") or "0"
        return sign + canonical if canonical != "0" else "0"


def _plain_number(text: str) -> Fraction | int | str | None:
    """``text`` as an exact number when it is a plain integer, decimal or fraction, else None."""
    if text.isdecimal():  # the usual answer: digits alone
        return _integer(text)
    s = text.strip().strip("$").replace(",", "").replace(" ", "")
    if s.isdecimal() or (s[:1] in ("+", "-") and s[1:].isdecimal()):  # an integer: no Fraction needed
        return _integer(s)
    if _NUMBER_RE.fullmatch(s):
        try:
            return Fraction(s)
        except (ValueError, ZeroDivisionError):
            return None
    return None


#: Gold answers repeat every episode of a task: parsed once (submitted answers are not cached).
_gold_number = lru_cache(maxsize=65_536)(_plain_number)


def _math_verify(gold: str, answer: str) -> bool:
    from math_verify import parse, verify

    g = parse(gold if "$" in gold or "\\" in gold else f"${gold}$", parsing_timeout=None)
    a = parse(answer if "$" in answer or "\\" in answer else f"${answer}$", parsing_timeout=None)
    if not g or not a:
        return False
    return bool(verify(g, a, timeout_seconds=None))


def math_equal(gold: str, answer: str, timeout_s: float = 5.0) -> bool:
    """True when ``answer`` is mathematically equal to ``gold``.

    Plain numbers (``12``, ``-3.5``, ``7/2``) are compared exactly as fractions; anything else
    goes through math-verify in a worker thread bounded by ``timeout_s``.

    Raises:
        JudgeError: math-verify did not finish within ``timeout_s``.
    """
    g, a = _gold_number(gold), _plain_number(answer)
    if g is not None and a is not None:
        return g == a
    future = _VERIFY_POOL.submit(_math_verify, gold, answer)
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        future.cancel()
        raise JudgeError(f"math-verify took longer than {timeout_s}s on answer {answer[:80]!r}") from None


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    if text.isalnum():  # one word (a year, a name): nothing to strip unless it is an article itself
        return "" if text in _ARTICLES else text
    text = _ARTICLES_RE.sub(" ", text.translate(_PUNCTUATION))
    return " ".join(text.split())


#: Gold answers repeat every episode of a task: normalised once (submitted answers are not cached).
_normalized_gold = lru_cache(maxsize=65_536)(normalize_answer)


def token_f1(gold: str, answer: str) -> float:
    g, a = normalize_answer(gold).split(), normalize_answer(answer).split()
    common = Counter(g) & Counter(a)
    same = sum(common.values())
    if not g or not a:
        return float(g == a)
    if same == 0:
        return 0.0
    p, r = same / len(a), same / len(g)
    return 2 * p * r / (p + r)


def gold_answers(answer: Any) -> list[str]:
    if isinstance(answer, list | tuple):
        return [str(a) for a in answer]
    return [str(answer)]


# Verdicts are frozen, so the common ones are built once and shared.
_NO_ANSWER = Verdict(0.0, detail="no answer")
_ZERO = Verdict(0.0)
_MATCH = {True: Verdict(1.0, detail="equal"), False: Verdict(0.0, detail="not equal")}
_EXACT = {True: Verdict(1.0), False: _ZERO}


class _RuleJudge(TurnJudge):
    name = "rule/base"
    memoize = False  # cheap and deterministic: recomputing beats hashing the turn


class MathEquivJudge(_RuleJudge):
    """1.0 when the submitted answer equals the gold answer (math-verify), else 0.0.

    Args:
        timeout_s: bound on one verification; past it the judge raises ``JudgeError``.
    """

    name = "rule/math_equiv"

    def __init__(self, timeout_s: float = 5.0):
        self.timeout_s = timeout_s

    def score_one(self, turn: Turn) -> Verdict:
        answer, gold = turn.parsed.answer, turn.task.answer
        if answer is None:
            return _NO_ANSWER
        if isinstance(gold, str):  # one gold answer: the usual case
            return _MATCH[math_equal(gold, answer, self.timeout_s)]
        return _MATCH[any(math_equal(g, answer, self.timeout_s) for g in gold_answers(gold))]


class ExactMatchJudge(_RuleJudge):
    """1.0 when the SQuAD-normalised answer equals any gold answer, else 0.0."""

    name = "rule/exact_match"

    def score_one(self, turn: Turn) -> Verdict:
        answer, gold = turn.parsed.answer, turn.task.answer
        if answer is None:
            return _NO_ANSWER
        pred = normalize_answer(answer)
        if isinstance(gold, str):  # one gold answer: the usual case
            return _EXACT[pred == _normalized_gold(gold)]
        ok = any(pred == _normalized_gold(g) for g in gold_answers(gold))
        return _EXACT[ok]


class F1Judge(_RuleJudge):
    """The best SQuAD token F1 of the answer against the gold answers, in [0, 1]."""

    name = "rule/f1"

    def score_one(self, turn: Turn) -> Verdict:
        if turn.answer is None:
            return _NO_ANSWER
        return Verdict(max(token_f1(g, turn.answer) for g in gold_answers(turn.task.answer)))


class FormatJudge(_RuleJudge):
    """0.0 for a turn that parsed cleanly, -1.0 for a turn with any format issue."""

    name = "rule/format"
    term = "format"
    scope = "turn"

    def score_one(self, turn: Turn) -> Verdict:
        if turn.parsed.ok:
            return _ZERO
        return Verdict(-1.0, detail=",".join(i.code for i in turn.parsed.issues))


class ToolErrorJudge(_RuleJudge):
    """Minus the fraction of this turn's tool calls that failed through the agent's fault.

    Infrastructure failures are not counted (the env flags those turns instead).
    """

    name = "rule/tool"
    term = "tool"
    scope = "turn"

    def score_one(self, turn: Turn) -> Verdict:
        calls = [r for r in turn.tool_results if not r.infra_error]
        if not calls:
            return _ZERO
        failed = sum(not r.ok for r in calls)
        return Verdict(-failed / len(calls))
