"""Word problems in many phrasings (prm/Math-v0 levels 5 and 6), with templates held out whole.

Level 5 problems take one calculator call, level 6 problems two or three, each step using the
previous result. There are 42 templates; :data:`HELD_OUT` names the 12 that a training run never
sees (``templates="held_out"``), so an evaluation on them measures reading a new phrasing, not
new numbers in a known one. Their wording differs from every training template, and some use
operation words (``triple``, ``older``, ``cut into pieces``) that no training template uses.

Each task's ``meta`` holds its ``template`` id, ``held_out`` flag and ``calls``: the calculator
expressions of a worked solution, ``{r0}``, ``{r1}`` standing for earlier results. The agent
never sees ``meta``; demonstration writers (``experiments``) use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from prm_gym.core.errors import TaskError

_NAMES = ("Maya", "Tom", "Ava", "Noah", "Lena", "Omar", "Iris", "Kai", "Zoe", "Ravi", "Sara", "Ben")
_ITEMS = ("pencils", "apples", "stickers", "marbles", "cookies", "cards", "stamps", "beads")
#: Template selections accepted by ``templates=``.
TEMPLATE_SETS = ("train", "held_out", "all")


@dataclass(frozen=True)
class Template:
    """One phrasing: ``text`` with ``{a}``-style slots, the ``calls`` that solve it, number
    ranges ``nums`` (inclusive) and ``derived`` slots computed from them, in order."""

    id: str
    text: str
    calls: tuple[str, ...]
    nums: dict[str, tuple[int, int]]
    derived: tuple[tuple[str, str], ...] = ()


def _t(id_: str, text: str, calls: str, nums: str, derived: str = "") -> Template:
    """A template from compact strings: ``calls`` split on ``;``, ``nums`` as ``a=2-9 b=3-40``,
    ``derived`` as ``a=q*b; c=3*s-a-b``."""
    ranges = {}
    for part in nums.split():
        name, lo_hi = part.split("=")
        lo, hi = lo_hi.split("-")
        ranges[name] = (int(lo), int(hi))
    pairs = tuple(tuple(d.strip().split("=", 1)) for d in derived.split(";") if d.strip())
    return Template(id_, text, tuple(c.strip() for c in calls.split(";")), ranges, pairs)  # type: ignore[arg-type]


TEMPLATES: tuple[Template, ...] = (
    # one call
    _t(
        "w01",
        "{n} has {a} {item}. {n2} gives {n} {b} more. How many {item} does {n} have now?",
        "{a} + {b}",
        "a=5-90 b=2-60",
    ),
    _t("w02", "{n} had {a} {item} and lost {b} of them. How many {item} are left?", "{a} - {b}", "a=20-99 b=2-19"),
    _t(
        "w03",
        "There are {a} rows of chairs with {b} chairs in each row. How many chairs are there?",
        "{a} * {b}",
        "a=3-25 b=3-25",
    ),
    _t(
        "w04",
        "{a} {item} are split equally among {b} children. How many {item} does each child get?",
        "{a} / {b}",
        "q=2-20 b=2-12",
        "a=q*b",
    ),
    _t(
        "w05",
        "A book has {a} pages. {n} has read {b} pages. How many pages are left to read?",
        "{a} - {b}",
        "a=100-400 b=10-99",
    ),
    _t("w06", "Each ticket costs ${a}. How much do {b} tickets cost in dollars?", "{a} * {b}", "a=3-45 b=2-15"),
    _t(
        "w07",
        "{n} walked {a} km on Monday and {b} km on Tuesday. How many km did {n} walk in total?",
        "{a} + {b}",
        "a=3-40 b=3-40",
    ),
    _t(
        "w08",
        "A tank holds {a} litres. If {b} litres are poured out, how many litres remain?",
        "{a} - {b}",
        "a=50-500 b=5-49",
    ),
    _t("w09", "What is the product of {a} and {b}?", "{a} * {b}", "a=6-60 b=6-60"),
    _t("w10", "What do you get when you divide {a} by {b}?", "{a} / {b}", "q=3-40 b=3-15", "a=q*b"),
    _t("w11", "Find the sum of {a}, {b} and {c}.", "{a} + {b} + {c}", "a=10-99 b=10-99 c=10-99"),
    _t("w12", "How much bigger is {a} than {b}?", "{a} - {b}", "a=100-900 b=10-99"),
    _t(
        "w13",
        "A bus carries {a} passengers on each trip. How many passengers does it carry in {b} trips?",
        "{a} * {b}",
        "a=12-60 b=2-12",
    ),
    _t("w14", "{n} saves ${a} every week. How many dollars does {n} save in {b} weeks?", "{a} * {b}", "a=4-50 b=3-20"),
    _t("w15", "A class has {a} girls and {b} boys. How many children are in the class?", "{a} + {b}", "a=8-30 b=8-30"),
    # two or three calls
    _t(
        "w16",
        "{n} buys {a} packs of {item} with {b} in each pack, then gives away {c}. How many {item} does {n} have left?",
        "{a} * {b}; {r0} - {c}",
        "a=2-9 b=4-12 c=1-7",
    ),
    _t(
        "w17",
        "Pens cost ${a} each. {n} buys {b} pens and pays with a ${c} note. How many dollars of change does {n} get?",
        "{a} * {b}; {c} - {r0}",
        "a=2-9 b=2-9 c=100-100",
    ),
    _t(
        "w18",
        "A train travels at {a} km/h for {b} hours and then {c} km more. How many km does it travel?",
        "{a} * {b}; {r0} + {c}",
        "a=40-90 b=2-6 c=5-60",
    ),
    _t(
        "w19",
        "{n} has {a} {item} and buys {b} bags with {c} {item} in each. How many {item} does {n} have now?",
        "{b} * {c}; {a} + {r0}",
        "a=3-40 b=2-8 c=3-12",
    ),
    _t(
        "w20",
        "{a} students form {b} equal teams. Then {c} more join each team. How many students are in each team now?",
        "{a} / {b}; {r0} + {c}",
        "q=3-12 b=2-8 c=1-5",
        "a=q*b",
    ),
    _t(
        "w21",
        "A farmer has {a} cows. Each cow gives {b} litres of milk a day. How many litres do the cows give in {c} days?",
        "{a} * {b}; {r0} * {c}",
        "a=3-15 b=5-20 c=2-7",
    ),
    _t(
        "w22",
        "{n} earns ${a} an hour and works {b} hours. Then {n} spends ${c}. How many dollars are left?",
        "{a} * {b}; {r0} - {c}",
        "a=8-30 b=3-10 c=5-20",
    ),
    _t(
        "w23",
        "A box holds {a} {item}. {n} fills {b} boxes and has {c} {item} left over. How many {item} did {n} start with?",
        "{a} * {b}; {r0} + {c}",
        "a=6-24 b=2-9 c=1-5",
    ),
    _t(
        "w24",
        "{n} reads {a} pages a day for {b} days. The book has {c} pages. How many pages are still unread?",
        "{a} * {b}; {c} - {r0}",
        "a=10-30 b=2-7 c=250-400",
    ),
    _t(
        "w25",
        "A bike costs ${a}. The price is cut by ${b}, and {n} buys {c} bikes. How many dollars does {n} pay?",
        "{a} - {b}; {r0} * {c}",
        "a=100-300 b=10-60 c=2-5",
    ),
    _t(
        "w26",
        "{a} oranges are packed into bags of {b}. Each bag sells for ${c}. How many dollars do all the bags bring in?",
        "{a} / {b}; {r0} * {c}",
        "q=3-20 b=4-10 c=2-9",
        "a=q*b",
    ),
    _t(
        "w27",
        "A garden is {a} m by {b} m. Fencing costs ${c} a metre. What does fencing all 4 sides cost, in dollars?",
        "{a} + {b}; {r0} * 2; {r1} * {c}",
        "a=5-40 b=5-40 c=2-9",
    ),
    _t(
        "w28",
        "{n} has ${a}, buys {b} books at ${c} each and a bag for ${d}. How many dollars are left?",
        "{b} * {c}; {r0} + {d}; {a} - {r1}",
        "a=150-300 b=2-6 c=8-20 d=10-40",
    ),
    _t(
        "w29",
        "A cinema has {a} rows of {b} seats. {c} seats are empty. How many people are watching?",
        "{a} * {b}; {r0} - {c}",
        "a=8-20 b=10-25 c=3-40",
    ),
    _t(
        "w30",
        "{n} runs {a} laps of {b} metres each day. How many metres does {n} run in {c} days?",
        "{a} * {b}; {r0} * {c}",
        "a=2-10 b=200-400 c=2-7",
    ),
    # held out: never trained on (HELD_OUT)
    _t("h01", "Compute {a} times {b}, then subtract {c}.", "{a} * {b}; {r0} - {c}", "a=3-20 b=3-20 c=1-9"),
    _t(
        "h02",
        "Start with {a}. Add {b}, then multiply the result by {c}.",
        "{a} + {b}; {r0} * {c}",
        "a=3-40 b=3-40 c=2-9",
    ),
    _t("h03", "{n} is {a} years old. {n2} is {b} years older. How old is {n2}?", "{a} + {b}", "a=5-60 b=2-30"),
    _t(
        "h04",
        "A rope {a} cm long is cut into pieces of {b} cm. How many pieces are there?",
        "{a} / {b}",
        "q=3-30 b=2-15",
        "a=q*b",
    ),
    _t("h05", "If one crate weighs {a} kg, what do {b} crates weigh in kg?", "{a} * {b}", "a=7-45 b=3-15"),
    _t(
        "h06",
        "A school orders {a} boxes of chalk with {b} sticks per box and uses {c} sticks. How many sticks remain?",
        "{a} * {b}; {r0} - {c}",
        "a=3-12 b=10-24 c=5-30",
    ),
    _t(
        "h07",
        "Take {a}, subtract {b} from it, and divide what is left by {c}.",
        "{a} - {b}; {r0} / {c}",
        "q=2-15 b=3-30 c=2-9",
        "a=b+q*c",
    ),
    _t(
        "h08",
        "{n} had ${a}, spent ${b} on lunch and ${c} on a book. How many dollars does {n} have now?",
        "{a} - {b}; {r0} - {c}",
        "a=60-200 b=5-25 c=5-30",
    ),
    _t(
        "h09",
        "A printer prints {a} pages a minute. How many minutes does it need for {b} pages?",
        "{b} / {a}",
        "a=4-30 q=2-20",
        "b=q*a",
    ),
    _t(
        "h10",
        "A car park holds {a} cars, each with 4 wheels, and {b} more cars arrive. How many wheels are there now?",
        "{a} + {b}; {r0} * 4",
        "a=5-60 b=2-30",
    ),
    _t("h11", "Triple {a} and then add {b}. What number do you get?", "{a} * 3; {r0} + {b}", "a=5-90 b=2-60"),
    _t(
        "h12",
        "{n} scored {a}, {b} and {c} points in three games. What was the average score?",
        "{a} + {b} + {c}; {r0} / 3",
        "a=10-40 b=10-40 s=10-40",
        "c=3*s-a-b",
    ),
)
HELD_OUT = frozenset(t.id for t in TEMPLATES if t.id.startswith("h"))
_BY_LEVEL: dict[tuple[int, str], tuple[Template, ...]] = {}
for _level in (5, 6):
    for _which in TEMPLATE_SETS:
        _BY_LEVEL[_level, _which] = tuple(
            t
            for t in TEMPLATES
            if (len(t.calls) == 1) == (_level == 5)
            and (_which == "all" or (t.id in HELD_OUT) == (_which == "held_out"))
        )


def _value(expr: str) -> Fraction:
    """An exact value of a template's filled arithmetic (``+ - * /`` and integers only)."""
    tokens = re.findall(r"\d+|[-+*/()]", expr)
    pos = 0

    def atom() -> Fraction:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            v = total()
            pos += 1
            return v
        return Fraction(int(tok))

    def term() -> Fraction:
        nonlocal pos
        v = atom()
        while pos < len(tokens) and tokens[pos] in "*/":
            op, pos = tokens[pos], pos + 1
            v = v * atom() if op == "*" else v / atom()
        return v

    def total() -> Fraction:
        nonlocal pos
        v = term()
        while pos < len(tokens) and tokens[pos] in "+-":
            op, pos = tokens[pos], pos + 1
            v = v + term() if op == "+" else v - term()
        return v

    return total()


def _fill(t: Template, rng: np.random.Generator) -> tuple[str, str, dict[str, Any]] | None:
    """One problem from ``t``, or None when the drawn numbers break a rule (a derived slot or a
    step result that is not a positive whole number)."""
    nums: dict[str, int] = {k: int(rng.integers(lo, hi + 1)) for k, (lo, hi) in t.nums.items()}
    for name, expr in t.derived:
        value = _value(_sub(expr, nums))
        if value.denominator != 1 or value <= 0:
            return None
        nums[name] = int(value)
    names = [str(x) for x in rng.permutation(len(_NAMES))[:2]]
    words = {"n": _NAMES[int(names[0])], "n2": _NAMES[int(names[1])], "item": _ITEMS[int(rng.integers(len(_ITEMS)))]}
    results: list[int] = []
    for call in t.calls:
        filled = call.format(**{k: str(v) for k, v in nums.items()}, **{f"r{i}": str(r) for i, r in enumerate(results)})
        value = _value(filled)
        if value.denominator != 1 or value <= 0:
            return None
        results.append(int(value))
    question = t.text.format(**{k: str(v) for k, v in nums.items()}, **words)
    calls = [
        c.format(**{k: str(v) for k, v in nums.items()}, **{f"r{i}": f"{{r{i}}}" for i in range(3)}) for c in t.calls
    ]
    return question, str(results[-1]), {"template": t.id, "held_out": t.id in HELD_OUT, "calls": calls}


def _sub(expr: str, nums: dict[str, int]) -> str:
    """``expr`` with each slot name replaced by its number (``b+q*c`` -> ``7+3*4``)."""
    return re.sub(r"[a-z]+", lambda m: str(nums[m.group(0)]), expr)


def word_problem(rng: np.random.Generator, level: int, templates: str = "train") -> tuple[str, str, dict[str, Any]]:
    """A level-5 (one call) or level-6 (two or three calls) problem from the ``templates`` set:
    ``(question, answer, meta)``.

    Raises:
        TaskError: unknown template set.
    """
    if templates not in TEMPLATE_SETS:
        raise TaskError(f"templates must be one of {', '.join(TEMPLATE_SETS)}, got {templates!r}.")
    pool = _BY_LEVEL[level, templates]
    while True:
        t = pool[int(rng.integers(len(pool)))]
        made = _fill(t, rng)
        if made is not None:
            return made
