"""Word problems in many phrasings (prm/Math-v0 levels 5 and 6), with templates held out whole.

Level 5 problems take one calculator call, level 6 problems two or three, each step using the
previous result. There are 72 templates, 36 of each kind, and two ways to split them:

* the legacy split (``heldout_seed=None``, the default, and every committed ``make learn``
  result): :data:`HELD_OUT` names the 12 ``h`` templates that a training run never sees
  (``templates="held_out"``), the 30 ``w`` templates are trained on and the 30 ``p`` templates
  are not used. The held-out wording differs from every training template, and some use
  operation words (``triple``, ``older``, ``cut into pieces``) that no training template uses;
* the rotating split (``heldout_seed=<int>``, :func:`held_out_ids`): 18 one-call and 18
  multi-call templates of all 72 are held out, drawn afresh for each seed, and the other 36
  are trained on, so a study over seeds also samples which phrasings are new.

Either way an evaluation on the held-out templates measures reading a new phrasing, not new
numbers in a known one. Each template yields at least 50 distinct problems.

Each task's ``meta`` holds its ``template`` id, ``held_out`` flag (in the split used) and
``calls``: the calculator expressions of a worked solution, ``{r0}``, ``{r1}`` standing for
earlier results. The agent never sees ``meta``; demonstration writers (``experiments``) use it.
"""

from __future__ import annotations

import functools
import hashlib
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
    # the rotating pool only (heldout_seed=): 17 one-call, 13 multi-call; never in the legacy split
    _t(
        "p01",
        "A bakery sold {a} loaves in the morning and {b} in the afternoon. How many loaves did it sell that day?",
        "{a} + {b}",
        "a=10-80 b=10-80",
    ),
    _t(
        "p02",
        "{n} collects {item} and owns {a} so far. The goal is {b}. How many more {item} does {n} need?",
        "{b} - {a}",
        "a=5-60 b=70-150",
    ),
    _t(
        "p03",
        "A parking garage has {a} floors and each floor fits {b} cars. How many cars fit in the garage?",
        "{a} * {b}",
        "a=2-12 b=15-60",
    ),
    _t("p04", "{a} {item} are packed {b} to a jar. How many jars are filled?", "{a} / {b}", "q=3-25 b=2-12", "a=q*b"),
    _t(
        "p05",
        "It was {a} degrees at noon and the temperature fell by {b} degrees before midnight. "
        "How warm was it at midnight, in degrees?",
        "{a} - {b}",
        "a=30-90 b=2-25",
    ),
    _t("p06", "A spider has 8 legs. How many legs do {a} spiders have?", "{a} * 8", "a=3-80"),
    _t(
        "p07",
        "{n} scored {a} points and {n2} scored {b} points. By how many points did {n} win?",
        "{a} - {b}",
        "a=50-99 b=10-49",
    ),
    _t(
        "p08",
        "Every shelf in the library holds {a} books and all {b} shelves are full. How many books are on them?",
        "{a} * {b}",
        "a=12-45 b=4-30",
    ),
    _t(
        "p09",
        "A ribbon {a} metres long is shared equally by {b} friends. How many metres does each friend get?",
        "{a} / {b}",
        "q=2-30 b=2-9",
        "a=q*b",
    ),
    _t("p10", "Double {a}. What is the result?", "{a} * 2", "a=11-99"),
    _t(
        "p11",
        "A jar held {a} coins. {n} dropped in {b} more and {n2} dropped in {c}. How many coins are in the jar?",
        "{a} + {b} + {c}",
        "a=10-90 b=5-40 c=5-40",
    ),
    _t(
        "p12",
        "{n} has to drive {a} km and has already covered {b} km. How many km are still to go?",
        "{a} - {b}",
        "a=100-600 b=20-99",
    ),
    _t("p13", "What is {a} less than {b}?", "{b} - {a}", "a=2-40 b=50-200"),
    _t(
        "p14",
        "A recipe uses {a} grams of flour for one cake. How many grams of flour do {b} cakes use?",
        "{a} * {b}",
        "a=40-250 b=2-9",
    ),
    _t(
        "p15",
        "A plane has {a} seats arranged in rows of {b}. How many rows does it have?",
        "{a} / {b}",
        "q=10-40 b=4-9",
        "a=q*b",
    ),
    _t("p16", "Two numbers add up to {a}. One of them is {b}. What is the other one?", "{a} - {b}", "a=50-300 b=10-49"),
    _t("p17", "How many minutes are there in {a} hours?", "{a} * 60", "a=2-99"),
    _t(
        "p18",
        "{n} bakes {a} trays of {b} muffins and sells {c} of them. How many muffins are left?",
        "{a} * {b}; {r0} - {c}",
        "a=2-8 b=6-12 c=1-11",
    ),
    _t(
        "p19",
        "A bottle holds {a} ml and {n} empties it {b} times a day. How many ml does {n} drink in {c} days?",
        "{a} * {b}; {r0} * {c}",
        "a=200-500 b=2-5 c=2-7",
    ),
    _t(
        "p20",
        "Half of a class of {a} pupils go on a trip, and {b} teachers go with them. How many people go on the trip?",
        "{a} / 2; {r0} + {b}",
        "q=6-30 b=1-4",
        "a=2*q",
    ),
    _t(
        "p21",
        "{n} had {a} {item}, gave {b} to {n2} and later found {c} more. How many {item} does {n} have?",
        "{a} - {b}; {r0} + {c}",
        "a=20-80 b=1-19 c=1-20",
    ),
    _t(
        "p22",
        "A ticket costs ${a} for an adult and ${b} for a child. What do {c} adults and {d} children pay, in dollars?",
        "{a} * {c}; {b} * {d}; {r0} + {r1}",
        "a=10-30 b=4-9 c=1-5 d=1-6",
    ),
    _t(
        "p23",
        "{n} cycles {a} km on each of the 5 weekdays and {b} km on each of the 2 weekend days. "
        "How many km is that in a week?",
        "{a} * 5; {b} * 2; {r0} + {r1}",
        "a=3-30 b=5-60",
    ),
    _t(
        "p24",
        "A pizza is cut into {a} slices. {n} orders {b} pizzas and the guests eat {c} slices. "
        "How many slices are left over?",
        "{a} * {b}; {r0} - {c}",
        "a=6-12 b=2-6 c=1-11",
    ),
    _t("p25", "Subtract {b} from {a}, then double what you get.", "{a} - {b}; {r0} * 2", "a=50-150 b=5-49"),
    _t(
        "p26",
        "A school buys {a} boxes of {b} crayons and shares them equally among {c} classes. "
        "How many crayons does each class get?",
        "{a} * {b}; {r0} / {c}",
        "q=1-6 c=2-6 b=8-24",
        "a=c*q",
    ),
    _t(
        "p27",
        "{n}'s phone plan costs ${a} a month plus a one-off fee of ${b}. What does one year on the plan cost, "
        "in dollars?",
        "{a} * 12; {r0} + {b}",
        "a=10-60 b=20-99",
    ),
    _t(
        "p28",
        "A warehouse had {a} boxes. A truck took {b} of them away, then {c} vans each delivered {d} boxes. "
        "How many boxes are in the warehouse now?",
        "{a} - {b}; {c} * {d}; {r0} + {r1}",
        "a=100-400 b=10-99 c=2-5 d=10-30",
    ),
    _t(
        "p29",
        "A square field has sides of {a} m. A second square field has sides {b} m longer. "
        "What is the perimeter of the second field, in metres?",
        "{a} + {b}; {r0} * 4",
        "a=5-60 b=2-20",
    ),
    _t(
        "p30",
        "{n} shares {a} {item} equally among {b} bags, then takes {c} out of one bag. "
        "How many {item} are left in that bag?",
        "{a} / {b}; {r0} - {c}",
        "q=5-20 b=2-8 c=1-4",
        "a=q*b",
    ),
)
#: The legacy split (``heldout_seed=None``, every committed ``make learn`` result): the 12 ``h``
#: templates held out, the 30 ``w`` templates trained on, the ``p`` templates unused.
HELD_OUT = frozenset(t.id for t in TEMPLATES if t.id.startswith("h"))
LEGACY = tuple(t for t in TEMPLATES if t.id[0] in "wh")
#: The rotating split (``heldout_seed=<int>``) holds out this many one-call and this many multi-call
#: templates of all of :data:`TEMPLATES` and trains on the rest.
HELD_OUT_PER_KIND = 18


def one_call(t: Template) -> bool:
    """Whether ``t`` takes one calculator call (level 5) rather than two or three (level 6)."""
    return len(t.calls) == 1


@functools.cache
def held_out_ids(heldout_seed: int | None = None) -> frozenset[str]:
    """The held-out template ids: :data:`HELD_OUT` when ``heldout_seed`` is None; otherwise
    :data:`HELD_OUT_PER_KIND` one-call and as many multi-call templates, those whose
    ``sha256("<seed>:<id>")`` sorts first within their kind (the same for a seed on any machine
    and numpy version, a different draw for each seed)."""
    if heldout_seed is None:
        return HELD_OUT
    held: set[str] = set()
    for kind in (True, False):
        ids = sorted(
            (t.id for t in TEMPLATES if one_call(t) == kind),
            key=lambda i: hashlib.sha256(f"{heldout_seed}:{i}".encode()).hexdigest(),
        )
        held.update(ids[:HELD_OUT_PER_KIND])
    return frozenset(held)


@functools.cache
def template_pool(level: int, templates: str, heldout_seed: int | None = None) -> tuple[Template, ...]:
    """The templates a level-5 (one call) or level-6 problem draws from, in :data:`TEMPLATES` order."""
    held = held_out_ids(heldout_seed)
    return tuple(
        t
        for t in (LEGACY if heldout_seed is None else TEMPLATES)
        if one_call(t) == (level == 5) and (templates == "all" or (t.id in held) == (templates == "held_out"))
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


def _fill(t: Template, rng: np.random.Generator, held: frozenset[str]) -> tuple[str, str, dict[str, Any]] | None:
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
    return question, str(results[-1]), {"template": t.id, "held_out": t.id in held, "calls": calls}


def _sub(expr: str, nums: dict[str, int]) -> str:
    """``expr`` with each slot name replaced by its number (``b+q*c`` -> ``7+3*4``)."""
    return re.sub(r"[a-z]+", lambda m: str(nums[m.group(0)]), expr)


def word_problem(
    rng: np.random.Generator, level: int, templates: str = "train", heldout_seed: int | None = None
) -> tuple[str, str, dict[str, Any]]:
    """A level-5 (one call) or level-6 (two or three calls) problem from the ``templates`` set of
    the split ``heldout_seed`` picks (:func:`held_out_ids`): ``(question, answer, meta)``.

    Raises:
        TaskError: unknown template set.
    """
    if templates not in TEMPLATE_SETS:
        raise TaskError(f"templates must be one of {', '.join(TEMPLATE_SETS)}, got {templates!r}.")
    pool = template_pool(level, templates, heldout_seed)
    held = held_out_ids(heldout_seed)
    while True:
        t = pool[int(rng.integers(len(pool)))]
        made = _fill(t, rng, held)
        if made is not None:
            return made
