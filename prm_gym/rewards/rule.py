"""Rule verifiers: deterministic, local judges.

=====================  =======  ======  ==========================================
id                     term     scope   score
=====================  =======  ======  ==========================================
``rule/math_equiv``    outcome  final   1.0 if the answer equals the gold (exact numbers, the MATH
                                        grader's normalisation, math-verify), else 0.0
``rule/exact_match``   outcome  final   1.0 if the normalised answer equals a gold answer
``rule/f1``            outcome  final   best SQuAD v1.1 token F1 against the gold answers, in [0, 1]
                                        (``mode="hotpotqa"``: HotpotQA's yes/no/noanswer rule)
``rule/format``        format   turn    0.0 if the turn parsed cleanly, -1.0 otherwise
``rule/tool``          tool     turn    minus the fraction of this turn's tool calls that failed
                                        through the agent's fault, in [-1, 0]
=====================  =======  ======  ==========================================
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from fractions import Fraction
from functools import lru_cache
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.rewards import math_norm, math_worker
from prm_gym.rewards.math_units import is_unit_phrase
from prm_gym.rewards.protocol import TurnJudge
from prm_gym.rewards.types import Turn, Verdict

_NUMBER_RE = re.compile(r"[-+]?\d+(?:\.\d+)?|[-+]?\d+/\d+")
_THOUSANDS_RE = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = ("a", "an", "the")
_ARTICLES_RE = re.compile(rf"\b({'|'.join(_ARTICLES)})\b")
#: Longest cleaned answer that reaches sympy, and deepest bracket nesting: past either the answer is
#: scored wrong without a symbolic check (no grader answer is that long or that deep).
MAX_SYMBOLIC_CHARS = 1000
MAX_SYMBOLIC_DEPTH = 40


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
    """``text`` as an exact number when it is a plain integer, decimal or fraction, else None.

    Commas count only as thousands separators (``1,203``, never ``1,2``); a space is never
    removed (``1 8`` is two numbers, not 18).
    """
    if text.isdecimal():  # the usual answer: digits alone
        return _integer(text)
    s = text.strip().strip("$")
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    if s.isdecimal() or (s[:1] in ("+", "-") and s[1:].isdecimal()):  # an integer: no Fraction needed
        return _integer(s)
    if _NUMBER_RE.fullmatch(s):
        try:
            return Fraction(s)
        except (ValueError, ZeroDivisionError):
            return None
    return None


#: Gold answers repeat every episode of a task: parsed and cleaned once (submitted answers are not cached).
_gold_number = lru_cache(maxsize=65_536)(_plain_number)
_gold_clean = lru_cache(maxsize=65_536)(lambda gold: math_norm.clean(gold, any_unit=True))


def _foreign_digits(text: str) -> bool:
    """True when ``text`` has a digit or numeral other than ASCII 0-9 (Arabic-Indic ``١٨``, full-width
    ``１８``, superscript ``²``, circled ``①``, ``½``): the official MATH and PRM800K scorers do not read
    them as numbers, and Unicode's compatibility folding would turn ``12²`` into ``122``."""
    return not text.isascii() and any(ch.isnumeric() and not "0" <= ch <= "9" for ch in text)


def _too_complex(text: str) -> str | None:
    """Why ``text`` may not reach sympy (too long, nested too deep), or None."""
    if len(text) > MAX_SYMBOLIC_CHARS:
        return f"answer too long for a symbolic check ({len(text)} > {MAX_SYMBOLIC_CHARS} characters)"
    depth = deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    if deepest > MAX_SYMBOLIC_DEPTH:
        return f"answer nested too deep for a symbolic check ({deepest} > {MAX_SYMBOLIC_DEPTH} levels)"
    return None


def math_verdict(gold: str, answer: str, timeout_s: float = 5.0) -> tuple[bool, str]:
    """Whether ``answer`` equals ``gold``, and why.

    An answer written with digits or numerals other than ASCII 0-9 (``١٨``, ``²``) is wrong, as in the
    official scorers, and so is an equation two of whose sides are different plain numbers (``152 = 151``).
    In order: plain numbers compare exactly as fractions; both sides are cleaned
    (:func:`prm_gym.rewards.math_norm.clean`) and compared as exact numbers, then by the MATH
    grader's normalised string; only what is left goes to math-verify, in a child process killed
    when the check has used ``timeout_s`` of CPU time (:mod:`prm_gym.rewards.math_worker`), with math
    delimiters around both sides. An answer that uses its CPU time, crashes the check, or is too long or
    deep is the agent's: it scores wrong, with the reason.

    Raises:
        JudgeError: infrastructure: the checking process could not be started, or the machine or the
            pool is saturated (no verdict within the wall-clock bound while under the CPU time).
    """
    if _foreign_digits(answer) and not _foreign_digits(gold):
        return False, "digits or numerals other than ASCII 0-9 (the official scorers do not read them)"
    g, a = _gold_number(gold), _plain_number(answer)
    if g is not None and a is not None:
        return g == a, "exact number"
    gc, ac = _gold_clean(gold), math_norm.clean(answer)
    if "=" in ac and "=" not in gc and "%" not in answer:  # cleaning drops \%: 0.25 = 25\% is true
        sides = [math_norm.number(side) for side in ac.split("=")]
        if len({n for n in sides if n is not None}) > 1:  # 152 = 151 (math-verify reads the last side)
            return False, "a false equation: two of its sides are different plain numbers"
    gn, an = math_norm.number(gc), math_norm.number(ac)
    if gn is not None and an is None:  # a number asked for: one number with unit words counts
        split = math_norm.trailing_words(ac)
        if split is not None and not is_unit_phrase(split[1]):  # 15/7 squared, 18 halves, 18 is wrong
            return False, f"words after the number that are not a unit: {split[1][:40]!r}"
        an = math_norm.unit_number(ac)
    if gn is not None and an is not None:
        return gn == an, "exact number"
    if math_norm.loose_digits(ac) != math_norm.loose_digits(gc):
        return False, "two numbers separated by a space"
    if math_norm.grader_key(gc) == math_norm.grader_key(ac):
        return True, "same normalised answer"
    if not ac or not gc:
        return False, "empty answer"
    why = _too_complex(ac)
    if why:
        return False, why
    try:
        return math_worker.POOL.verify(f"${gc}$", f"${ac}$", timeout_s), "math-verify"
    except math_worker.VerifyTimeout:
        return False, f"the symbolic check of the answer used {timeout_s}s of CPU time and was stopped"
    except math_worker.VerifyFailed as exc:
        return False, f"the symbolic check failed on the answer: {exc}"[:200]


def math_equal(gold: str, answer: str, timeout_s: float = 5.0) -> bool:
    """True when ``answer`` is mathematically equal to ``gold`` (see :func:`math_verdict`)."""
    return math_verdict(gold, answer, timeout_s)[0]


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
    """SQuAD v1.1 token F1: 0.0 when no token is shared, so also when either side normalises to nothing."""
    g, a = normalize_answer(gold).split(), normalize_answer(answer).split()
    same = sum((Counter(g) & Counter(a)).values())
    if same == 0:
        return 0.0
    p, r = same / len(a), same / len(g)
    return 2 * p * r / (p + r)


#: Answers HotpotQA's official script scores all or nothing.
HOTPOT_SPECIAL = frozenset({"yes", "no", "noanswer"})


def hotpot_f1(gold: str, answer: str) -> float:
    """HotpotQA's answer F1: token F1, except that ``yes``, ``no`` and ``noanswer`` on either side
    score 0.0 unless both sides normalise to the same string."""
    g, a = normalize_answer(gold), normalize_answer(answer)
    if (a in HOTPOT_SPECIAL or g in HOTPOT_SPECIAL) and a != g:
        return 0.0
    return token_f1(gold, answer)


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
    """1.0 when the submitted answer equals the gold answer (see :func:`math_verdict`), else 0.0.

    Args:
        timeout_s: bound on the symbolic check of one answer; an answer whose check runs past it
            scores 0.0 (its ``detail`` says so): a pathological answer is the agent's.
    """

    name = "rule/math_equiv"
    needs_answer = True  # the gold answer: the TRL adapter refuses a dataset without one

    def __init__(self, timeout_s: float = 5.0):
        self.timeout_s = timeout_s

    def score_one(self, turn: Turn) -> Verdict:
        answer, gold = turn.parsed.answer, turn.task.answer
        if answer is None:
            return _NO_ANSWER
        if isinstance(gold, str) and gold.isdecimal() and answer.isdecimal() and answer.isascii():  # the usual case
            return _MATCH[_gold_number(gold) == _integer(answer)]
        why = "no gold answer"
        for g in gold_answers(gold):
            ok, why = math_verdict(g, answer, self.timeout_s)
            if ok:
                return _MATCH[True]
        return Verdict(0.0, detail=f"not equal ({why})")


class ExactMatchJudge(_RuleJudge):
    """1.0 when the SQuAD-normalised answer equals any gold answer, else 0.0."""

    name = "rule/exact_match"
    needs_answer = True  # the gold answer: the TRL adapter refuses a dataset without one

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
    """The best token F1 of the answer against the gold answers, in [0, 1].

    Args:
        mode: ``"squad"`` (default: the SQuAD v1.1 script's F1) or ``"hotpotqa"`` (HotpotQA's
            script: ``yes``/``no``/``noanswer`` score all or nothing).
    """

    name = "rule/f1"
    needs_answer = True  # the gold answer: the TRL adapter refuses a dataset without one

    def __init__(self, mode: str = "squad"):
        if mode not in ("squad", "hotpotqa"):
            raise ConfigError(f"rule/f1: mode must be 'squad' or 'hotpotqa', got {mode!r}.")
        self.mode = mode
        self._f1 = token_f1 if mode == "squad" else hotpot_f1

    def score_one(self, turn: Turn) -> Verdict:
        if turn.answer is None:
            return _NO_ANSWER
        return Verdict(max(self._f1(g, turn.answer) for g in gold_answers(turn.task.answer)))


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
