"""rule/math_equiv against a MATH grader, and a verdict within the deadline for hostile answers."""

from __future__ import annotations

import itertools
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from prm_gym.core.errors import JudgeError
from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards import math_worker
from prm_gym.rewards.rule import MathEquivJudge, math_equal, math_verdict
from prm_gym.rewards.types import Turn

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ a reference MATH grader
def _ref_fix_fracs(s: str) -> str:
    subs = s.split("\\frac")
    out = subs[0]
    for sub in subs[1:]:
        out += "\\frac"
        if sub[:1] == "{" or len(sub) < 2:
            out += sub
        elif sub[1] == "{":
            out += "{" + sub[0] + "}" + sub[1:]
        else:
            out += "{" + sub[0] + "}{" + sub[1] + "}" + sub[2:]
    return out


def _ref_strip(s: str) -> str:
    """Hendrycks et al.'s MATH ``is_equiv`` normalisation, step by step from its published description."""
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac").replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in s:  # units on the right
        s = s.split("\\text{ ")[0]
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2 and len(s.split("=")[0]) <= 2:
        s = s.split("=")[1]
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    s = s.replace(" ", "")
    s = _ref_fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    m = re.fullmatch(r"(\d+)/(\d+)", s)
    if m:
        s = f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
    return s


def ref_is_equiv(gold: str, answer: str) -> bool:
    return _ref_strip(gold) == _ref_strip(answer)


# (gold, submitted answer, expected verdict)
TABLE = [
    # the gold submitted verbatim
    ("\\sqrt{51}", "\\sqrt{51}", True),
    ("\\pi", "\\pi", True),
    ("\\text{Evelyn}", "\\text{Evelyn}", True),
    ("\\frac43", "\\frac43", True),
    ("(2,\\infty)", "(2,\\infty)", True),
    ("[-2, 5)", "[-2, 5)", True),
    ("\\{1, 3\\}", "\\{1, 3\\}", True),
    ("x^2 + 7x + 10", "x^2 + 7x + 10", True),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),
    # the gold in a box, in delimiters, in bold
    ("3\\sqrt{13}", "\\boxed{3\\sqrt{13}}", True),
    ("\\frac{1}{2}", "$\\boxed{\\frac{1}{2}}$", True),
    ("\\sqrt{2}", "\\(\\sqrt{2}\\)", True),
    ("18", "**18**", True),
    ("18", "The answer is $\\boxed{18}$.", True),
    # \dfrac / \tfrac / \frac
    ("\\frac{15}{7}", "\\dfrac{15}{7}", True),
    ("15/7", "\\tfrac{15}{7}", True),
    ("\\dfrac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}", True),
    ("\\frac{\\sqrt{3}}{2}", "\\tfrac{\\sqrt3}{2}", True),
    ("\\frac{15}{7}", "15/7", True),
    ("\\frac{1}{2}", "0.5", True),
    # separators, mixed numbers, scientific notation
    ("10,\\!080", "10080", True),
    ("10080", "10,080", True),
    ("10080", "10\u2009080", True),
    ("10080", "10\u00a0080", True),
    ("10080", "10\\,080", True),
    ("137 \\frac{1}{2}", "137.5", True),
    ("18", "1.8e1", True),
    ("18", "1.8 \\times 10^{1}", True),
    # units, text, currency, degrees, percent, a trailing period
    ("18", "18 dollars", True),
    ("18", "18 km/h", True),
    ("40", "40 km per hour", True),
    ("18", "$18$ dollars", True),
    ("11111111100", "11,\\! 111,\\! 111,\\! 100", True),  # MATH's separator with a space
    ("11,\\! 111,\\! 111,\\! 100", "11111111100", True),
    ("18", "\\text{18}", True),
    ("18", "\\$18", True),
    ("18", "$18", True),
    ("5", "5\\text{ cm}", True),
    ("30", "30^\\circ", True),
    ("50", "50\\%", True),
    ("18", "18.", True),
    ("x=3", "3", True),
    # equal by mathematics, not by spelling
    ("1+x^2", "x^2+1", True),
    ("2\\sqrt{3}", "\\sqrt{12}", True),
    ("\\frac{\\pi}{2}", "\\frac{1}{2}\\pi", True),
    # wrong answers stay wrong
    ("16", "16 \\sqrt{3}", False),
    ("16", "16\\sqrt{3}", False),
    ("18", "1 8", False),
    ("1820", "18 20", False),
    ("137", "137 \\frac{1}{2}", False),
    ("18", "19", False),
    ("18", "1.8", False),
    ("\\frac{15}{7}", "\\frac{7}{15}", False),
    ("(2,\\infty)", "[2,\\infty)", False),
    ("1,2", "12", False),
    ("12", "1,2", False),
    ("\\text{Evelyn}", "\\text{Bob}", False),
    ("1.5", "1.5 million", False),
    ("3", "", False),
    ("3", "3 x", False),  # a variable, not a unit
    ("2", "2 pi", False),
    ("5", "5 sin", False),
    ("3y", "3 y", True),
    ("18", "3.5 square feet", False),
    ("3.5", "3.5 square feet", True),
    # words after a number that change or deny it, or count things (issue 32): not a unit
    ("15/7", "15/7 squared", False),
    ("15/7", "15/7 is not correct", False),
    ("15/7", "15/7 dozen", False),
    ("18", "18 halves", False),
    ("18", "18 apples", False),
    ("18", "18 square", False),
    ("18", "$18$ is not correct", False),
    ("15/7", "$\\frac{15}{7}$ squared", False),
    ("15/7", "15/7\\text{ dozen}", False),
    ("18", "18 hundred", False),
    # digits the official scorers do not read (issue 32: rejected, as they do)
    ("18", "\u0661\u0668", False),  # Arabic-Indic
    ("18", "\uff11\uff18", False),  # full-width
    ("18", "\u06f1\u06f8", False),  # extended Arabic-Indic (Persian)
    # superscript and circled digits: Unicode folding made 12² read as 122 (an attack audit, 5 Dec)
    ("122", "12\u00b2", False),  # 12² is 144, not 122
    ("151", "1\u2075\u00b9", False),  # 1⁵¹ is 1
    ("144", "12\u00b2", False),  # true, but no official scorer reads it: rejected, as they do
    ("151", "\u2460\u2464\u2460", False),  # circled ①⑤①
    ("x^2+1", "x\u00b2+1", False),
    ("1/2", "\u00bd", False),  # a vulgar fraction
    # a false equation whose last side is the gold (an attack audit, 5 Dec 2026)
    ("151", "152 = 151", False),  # math-verify reads the last side
    ("151", "3 = 151", False),  # the MATH grader drops a left side of 2 characters or fewer
    ("151", "x = 151", True),
    ("25\\%", "0.25 = 25\\%", True),  # cleaning drops \% (a review of the rule)
    ("0.25", "25\\% = 0.25", True),  # the MATH grader accepts it: a short left side
    ("25\\%", "\\frac{1}{4} = 25\\%", True),
    ("5", "1e999999999", False),  # no 10**999999999 computed in-process
    ("1000", "1e3", True),
]


@pytest.mark.parametrize(("gold", "answer", "expected"), TABLE)
def test_fidelity_table(gold: str, answer: str, expected: bool) -> None:
    assert math_equal(gold, answer) is expected, math_verdict(gold, answer)


def test_every_answer_the_math_grader_accepts_is_accepted() -> None:
    """Where the reference grader says equal, so do we, except two numbers it joins by dropping a space."""
    deliberate = {("15/7", "15/7\\text{ dozen}")}  # it drops any \text{ ...} after the answer; a unit only here
    deliberate.add(("151", "3 = 151"))  # it drops a short left side; a false equation here
    accepted = [(g, a) for g, a, _ in TABLE if ref_is_equiv(g, a) and not re.search(r"\d\s+\d", a)]
    assert len(accepted) >= 15
    assert [(g, a) for g, a in accepted if not math_equal(g, a)] == sorted(deliberate)
    assert ref_is_equiv("18", "1 8") and not math_equal("18", "1 8")  # strict where the grader is lenient


def test_plain_numbers_need_no_worker_process() -> None:
    before = math_worker.POOL.requests
    pairs = [("42", "42"), ("7/2", "3.5"), ("1,203", "1203"), ("\\frac{15}{7}", "\\dfrac{15}{7}"), ("0.5", "1/2")]
    assert all(math_equal(g, a) for g, a in pairs)
    assert not math_equal("42", "43")
    assert math_worker.POOL.requests == before


def test_the_judge_says_why_an_answer_is_wrong() -> None:
    parsed = parse_action("<answer>1 8</answer>")
    verdict = MathEquivJudge().score_one(Turn(Task("t", "q", "18"), 0, "", parsed, (), (), True))
    assert verdict.score == 0.0 and "two numbers" in verdict.detail


HOSTILE = ["9^{9^{9^{9}}}", "(" * 10_000 + "1" + ")" * 10_000, "9^{9^{9^{9}}}", "2^{2^{2^{2^{2^{2^{2}}}}}}"]


def test_hostile_answers_get_a_verdict_within_the_limit_off_the_main_thread() -> None:
    """Each hostile answer is wrong within the limit (plus a child's start); grading goes on after them."""
    limit = 2.0
    results: list[tuple[bool, str, float]] = []

    def grade() -> None:
        math_equal("x+1", "1+x")  # a child started (its import is not part of any deadline)
        for answer in [*HOSTILE, "\\frac{15}{7}", "2\\sqrt{3}"]:
            gold = {"\\frac{15}{7}": "15/7", "2\\sqrt{3}": "\\sqrt{12}"}.get(answer, "5")
            start = time.monotonic()
            ok, why = math_verdict(gold, answer, timeout_s=limit)
            results.append((ok, why, time.monotonic() - start))

    worker = threading.Thread(target=grade)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "a hostile answer hung the verifier"
    assert [ok for ok, _, _ in results] == [False] * len(HOSTILE) + [True, True], results
    # the limit is CPU time: on a busy machine a check takes longer, within its wall-clock bound (plus
    # killing the child and the start of its replacement, begun right after the kill)
    assert all(elapsed < math_worker.WALL_FACTOR * limit + 5.0 for _, _, elapsed in results), results
    assert "stopped" in results[0][1] and "too long" in results[1][1]


def test_the_interpreter_exits_cleanly_after_hostile_answers() -> None:
    script = (
        "import threading\n"
        "from prm_gym.rewards.rule import math_equal\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.append(math_equal('5', '9^{9^{9^{9}}}', 1.0)))\n"
        "t.start(); t.join()\n"
        "assert out == [False] and math_equal('\\\\sqrt{12}', '2\\\\sqrt{3}', 5.0)\n"
        "print('done')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-2000:]


# Gold answers in the forms MATH solutions use; each must be accepted verbatim, boxed, in math
# delimiters, in bold, with a trailing period, and with \frac and \dfrac swapped.
GOLDS = [
    "\\frac{1}{2}", "\\sqrt{51}", "3\\sqrt{13}", "\\pi", "2\\pi", "\\frac{\\pi}{4}", "\\text{Evelyn}", "\\frac43",
    "(2,\\infty)", "(-\\infty, 3] \\cup [5, \\infty)", "\\{1, 3\\}", "10,\\!080", "137 \\frac{1}{2}",
    "x^2 + 7x + 10", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\$18.90", "30^\\circ", "50\\%",
    "\\frac{\\sqrt{3}}{2}", "-\\frac{7}{4}", "\\dfrac{9}{2}", "2 \\sqrt{5}", "\\text{(C)}", "1, 2, 3", "y = 2x + 3",
    "\\left( 3, \\frac{\\pi}{2} \\right)", "6 \\text{ inches}", "\\sqrt[3]{2}", "a^2 + b^2", "\\infty", "0", "-1",
    "\\tfrac{3}{8}", "8\\sqrt{2} - 4", "\\frac{1 + \\sqrt{5}}{2}", "4.5", "\\text{odd}", "\\frac{3}{4}\\pi", "e^{2}",
    "\\log_2 3", "[0, 1)", "12\\text{ cm}^2", "5!", "\\binom{5}{2}", "3+2i", "\\frac{17}{2}", "1.25",
]  # fmt: skip


def _forms(gold: str) -> list[str]:
    swapped = gold.replace("\\dfrac", "\\frac") if "\\dfrac" in gold else gold.replace("\\frac", "\\dfrac")
    return [gold, f"\\boxed{{{gold}}}", f"${gold}$", f"**{gold}**", f"{gold}.", swapped, f"\\boxed{{{swapped}}}"]


@pytest.mark.parametrize("gold", GOLDS)
def test_the_gold_in_every_usual_form_is_accepted(gold: str) -> None:
    rejected = [form for form in _forms(gold) if not math_equal(gold, form)]
    assert rejected == []


def _one_digit_off(gold: str) -> str:
    i = next(i for i, c in enumerate(gold) if c.isdigit())
    return gold[:i] + str((int(gold[i]) + 1) % 10) + gold[i + 1 :]


@pytest.mark.parametrize("gold", [g for g in GOLDS if any(c.isdigit() for c in g)])
def test_the_gold_with_one_digit_changed_is_rejected(gold: str) -> None:
    assert not math_equal(gold, _one_digit_off(gold)), _one_digit_off(gold)


def test_threads_checking_at_once_each_get_their_own_verdicts() -> None:
    """More threads than children, hostile and honest answers mixed: no verdict answers another question."""
    jobs = [
        ("5", "9^{9^{9^{9}}}", False),
        ("\\sqrt{12}", "2\\sqrt{3}", True),
        ("x^2+1", "1+x^2", True),
        ("x^2", "x^3", False),
    ]
    got: dict[int, list[bool]] = {}

    def grade(k: int) -> None:
        got[k] = [math_equal(g, a, timeout_s=1.0) for g, a, _ in jobs[k % 4 :] + jobs[: k % 4]]

    threads = [threading.Thread(target=grade, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    want = [ok for _, _, ok in jobs]
    assert {k: v for k, v in got.items()} == {k: want[k % 4 :] + want[: k % 4] for k in range(4)}


def test_a_hung_child_left_alone_dies_on_its_own_alarm() -> None:
    """The backstop for a child whose parent is gone mid-check: SIGALRM ends it, GIL or not."""
    child = math_worker._Child()
    try:
        child.wait_ready()
        assert child.proc.stdin is not None
        child.proc.stdin.write(b'["$5$", "$9^{9^{9^{9}}}$", 600, 1]\n')  # 600 s of CPU, 1 s of wall clock
        child.proc.stdin.flush()
        assert child.proc.wait(timeout=30) == -signal.SIGALRM
    finally:
        child.kill()


def test_the_deadline_is_cpu_time_so_a_stalled_check_still_gets_its_verdict() -> None:
    """The child is stopped (SIGSTOP) for 2.5 s of wall clock during an honest check with a 1 s deadline: on
    wall-clock time it was a timeout, scored wrong; on CPU time it is the right verdict."""
    pool = math_worker.VerifyPool(max_workers=1)
    try:
        assert pool.verify("$x$", "$x$", 5.0)  # a child started and idle
        (child,) = pool._idle
        os.kill(child.proc.pid, signal.SIGSTOP)
        got: list[str] = []
        check = threading.Thread(target=lambda: got.append(_outcome(pool, "$\\sqrt{12}$", "$2\\sqrt{3}$", 1.0)))
        check.start()
        time.sleep(2.5)
        os.kill(child.proc.pid, signal.SIGCONT)
        check.join(30)
        assert got == ["True"]
    finally:
        pool.close()


def test_more_hostile_answers_than_children_are_each_the_agents_timeout() -> None:
    """Five threads check an exponent tower at once with two children: a request that waited its deadline
    starts a child of its own, so none is excluded as infrastructure for the queue ahead of it (four of
    ten were, with the wait counted against the check's wall-clock bound)."""
    pool = math_worker.VerifyPool(max_workers=2)
    try:
        got: list[str] = []
        threads = [
            threading.Thread(target=lambda: got.append(_outcome(pool, "$5$", "$9^{9^{9^{9}}}$", 1.0))) for _ in range(5)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert got == ["timeout"] * 5
        assert len(pool._alive) <= pool.max_workers  # the extra children are ended after their check
    finally:
        pool.close()


def test_a_check_that_cannot_get_a_worker_in_time_is_infrastructure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every child busy (the cap reached, one busy check with a far CPU deadline): a JudgeError, flagged as the
    platform's, never a wrong answer charged to the agent; and the bound holds."""
    monkeypatch.setattr(math_worker, "MAX_CHILDREN", 1)
    pool = math_worker.VerifyPool(max_workers=1)
    try:
        busy = threading.Thread(target=lambda: _outcome(pool, "$5$", "$9^{9^{9^{9}}}$", 30.0))
        busy.start()
        time.sleep(0.5)
        start = time.monotonic()
        with pytest.raises(JudgeError, match="saturated"):
            pool.verify("$x$", "$x$", 0.2)
        assert time.monotonic() - start < math_worker.WALL_FACTOR * 0.2 + 1.0
    finally:
        pool.close()
        busy.join(60)


def _outcome(pool: math_worker.VerifyPool, gold: str, answer: str, timeout_s: float) -> str:
    try:
        return str(pool.verify(gold, answer, timeout_s))
    except math_worker.VerifyTimeout:
        return "timeout"
    except (math_worker.VerifyFailed, JudgeError) as exc:
        return type(exc).__name__


_TOKENS = ["1", "2", "3", "x", "y", "+", "-", "\\frac{1}{2}", "\\sqrt{3}", "\\pi", "(", ")", "^2", "^{3}", ","]
_TOKENS += ["i", "e", "\\cdot", "=", "m", "cm", "\\text{cm}", "pi", "ab"]


def _spaced(tokens: list[str], rng: random.Random) -> str:
    """``tokens`` joined, with spaces put where the MATH grader ignores them (never digit|digit, letter|letter)."""
    out = tokens[0]
    for a, b in itertools.pairwise(tokens):
        apart = (a[-1].isdigit() and b[0].isdigit()) or (a[-1].isalpha() and b[0].isalpha())
        out += (" " if not apart and rng.random() < 0.5 else "") + b
    return out


def test_spacing_the_grader_ignores_never_changes_the_verdict() -> None:
    """Random expressions against themselves with spaces added: wherever the MATH grader accepts, so do we."""
    rng = random.Random(0)
    rejected = []
    for _ in range(1500):
        tokens = [rng.choice(_TOKENS) for _ in range(rng.randint(1, 5))]
        gold, answer = "".join(tokens), _spaced(tokens, rng)
        if ref_is_equiv(gold, answer) and not math_equal(gold, answer, timeout_s=2.0):
            rejected.append((gold, answer))
    assert rejected == []


@pytest.mark.parametrize(
    "answer", ["\uff11\uff18", "\u0661\u0668", "\u0967\u096e", "1\u2078", "\u2460\u2467"]
)  # full-width, Arabic-Indic, Devanagari, superscript, circled
def test_the_judge_rejects_digits_the_official_scorers_do_not_read(answer: str) -> None:
    """The judge's digits-only fast path read them with int(); now they score 0, with the reason."""
    verdict = MathEquivJudge().score_one(
        Turn(Task("t", "q", "18"), 0, "", parse_action(f"<answer>{answer}</answer>"), (), (), True)
    )
    assert verdict.score == 0.0 and "ASCII" in verdict.detail


@pytest.mark.parametrize(
    ("words", "unit"),
    [
        ("dollars", True),
        ("square feet", True),
        ("km/h", True),
        ("m/s", True),
        ("miles per hour", True),
        ("degrees Celsius", True),
        ("cm", True),
        ("square", False),  # a qualifier never ends the phrase: "18 square" may mean squared
        ("km per", False),
        ("squared", False),
        ("dozen", False),
        ("halves", False),
        ("is not correct", False),
        ("apples", False),
        ("s", False),  # a single letter is a variable unless after a slash
        ("hundred", False),
    ],
)
def test_unit_phrases_are_units_of_measure_or_currency_only(words: str, unit: bool) -> None:
    from prm_gym.rewards.math_units import is_unit_phrase

    assert is_unit_phrase(words) is unit
