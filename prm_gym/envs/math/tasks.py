"""Math tasks: a seeded generator of word problems, and GSM8K / MATH file loaders.

Generated problems come in four difficulty levels, each with an exact answer:

1. arithmetic with precedence (``What is 17 + 6 * 4?``);
2. one- and two-step word problems (change, rates, sharing);
3. linear equations and fraction sums;
4. two-equation systems and percentages of quantities;
5. and 6. word problems in 72 phrasings taking one (5) or two to three (6) calculator calls, some
   held out whole: the legacy 12 of 42, or 36 of 72 rotating with ``heldout_seed``
   (:mod:`prm_gym.envs.math.words`, ``templates=``).

The generator is pure: the same ``(n, seed, split, levels)`` always gives the same tasks, and
the ``train`` and ``test`` splits draw from independent streams.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from prm_gym.core.errors import TaskError
from prm_gym.core.progress import track
from prm_gym.core.records import load_task_set
from prm_gym.core.tasks import Task, TaskSet, generated_once, require, task_from_record
from prm_gym.envs.math.words import word_problem

_NAMES = ("Maya", "Tom", "Ava", "Noah", "Lena", "Omar", "Iris", "Kai", "Zoe", "Ravi")
_ITEMS = ("pencils", "apples", "stickers", "notebooks", "marbles", "cookies", "tickets")
_SPLITS = {"train": 0, "test": 1, "validation": 2}

Gen = Callable[[np.random.Generator], tuple[str, str]]


def _i(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _arith(rng: np.random.Generator) -> tuple[str, str]:
    a, b, c = _i(rng, 2, 60), _i(rng, 2, 15), _i(rng, 2, 15)
    op = _i(rng, 0, 2)
    if op == 0:
        return f"What is {a} + {b} * {c}?", str(a + b * c)
    if op == 1:
        return f"What is ({a} - {b}) * {c}?", str((a - b) * c)
    return f"What is {a * c} / {c} - {b}?", str(a - b)


def _change(rng: np.random.Generator) -> tuple[str, str]:
    name, item = _NAMES[_i(rng, 0, 9)], _ITEMS[_i(rng, 0, 6)]
    price, count = _i(rng, 2, 19), _i(rng, 2, 12)
    bill = ((price * count) // 10 + 1 + _i(rng, 0, 3)) * 10
    return (
        f"{item.capitalize()} cost ${price} each. {name} buys {count} {item} and pays with ${bill}. "
        f"How many dollars of change does {name} get?",
        str(bill - price * count),
    )


def _rate(rng: np.random.Generator) -> tuple[str, str]:
    v1, t1, v2, t2 = _i(rng, 30, 90), _i(rng, 1, 5), _i(rng, 30, 90), _i(rng, 1, 5)
    return (
        f"A train travels at {v1} km/h for {t1} hours, then at {v2} km/h for {t2} hours. "
        "How many kilometres does it travel in total?",
        str(v1 * t1 + v2 * t2),
    )


def _share(rng: np.random.Generator) -> tuple[str, str]:
    name, item = _NAMES[_i(rng, 0, 9)], _ITEMS[_i(rng, 0, 6)]
    friends, each, left = _i(rng, 2, 9), _i(rng, 2, 12), _i(rng, 0, 9)
    total = friends * each + left
    return (
        f"{name} has {total} {item} and gives {each} to each of {friends} friends. "
        f"How many {item} does {name} have left?",
        str(left),
    )


def _linear(rng: np.random.Generator) -> tuple[str, str]:
    x, a, b = _i(rng, -20, 20), _i(rng, 2, 12), _i(rng, -50, 50)
    c = a * x + b
    sign = "+" if b >= 0 else "-"
    return f"Solve for x: {a}x {sign} {abs(b)} = {c}. What is x?", str(x)


def _fractions(rng: np.random.Generator) -> tuple[str, str]:
    a, b, c, d = _i(rng, 1, 9), _i(rng, 2, 12), _i(rng, 1, 9), _i(rng, 2, 12)
    s = Fraction(a, b) + Fraction(c, d)
    ans = str(s.numerator) if s.denominator == 1 else f"{s.numerator}/{s.denominator}"
    return f"What is {a}/{b} + {c}/{d}? Give the answer as a fraction in lowest terms.", ans


def _system(rng: np.random.Generator) -> tuple[str, str]:
    x, y = _i(rng, -15, 15), _i(rng, -15, 15)
    return f"If x + y = {x + y} and x - y = {x - y}, what is x * y?", str(x * y)


def _percent(rng: np.random.Generator) -> tuple[str, str]:
    base, pct, extra = _i(rng, 2, 40) * 20, _i(rng, 1, 19) * 5, _i(rng, 1, 30)
    return (
        f"A warehouse holds {base} boxes. {pct}% of them are shipped, then {extra} new boxes arrive. "
        "How many boxes are in the warehouse now?",
        str(base - base * pct // 100 + extra),
    )


LEVELS: dict[int, Sequence[Gen]] = {
    1: (_arith,),
    2: (_change, _rate, _share),
    3: (_linear, _fractions),
    4: (_system, _percent),
}
#: The word-problem levels (:mod:`prm_gym.envs.math.words`): one call, and two or three.
WORD_LEVELS = (5, 6)


@generated_once()
def generate_math_tasks(
    n: int = 1000,
    seed: int = 0,
    split: str = "train",
    levels: Sequence[int] = (1, 2, 3),
    templates: str = "train",
    heldout_seed: int | None = None,
) -> TaskSet:
    """``n`` generated math problems, levels drawn uniformly from ``levels``; the word-problem
    levels 5 and 6 draw their phrasings from ``templates`` (``train``, ``held_out`` or ``all``) of
    the split ``heldout_seed`` picks (None: the legacy 12 held out of 42; an int: 36 of 72,
    rotating with it; :func:`prm_gym.envs.math.words.held_out_ids`).

    Generated once per process for each set of arguments and shared (read-only ``meta``).

    Raises:
        TaskError: unknown split or level, or ``n < 1``.
    """
    if split not in _SPLITS:
        raise TaskError(f"split must be one of {sorted(_SPLITS)}, got {split!r}.")
    bad = [lv for lv in levels if lv not in LEVELS and lv not in WORD_LEVELS]
    if bad or not levels:
        raise TaskError(f"levels must be a non-empty subset of {[*sorted(LEVELS), *WORD_LEVELS]}, got {list(levels)}.")
    if n < 1:
        raise TaskError(f"the number of tasks must be >= 1, got {n}.")
    rng = np.random.default_rng([seed, _SPLITS[split]])
    tasks = []
    for k in track(range(n), desc="math tasks", unit="task"):
        level = int(levels[int(rng.integers(len(levels)))])
        meta: dict[str, Any] = {"level": level}
        if level in WORD_LEVELS:
            question, answer, extra = word_problem(rng, level, templates, heldout_seed)
            meta.update(extra)
        else:
            gens = LEVELS[level]
            question, answer = gens[int(rng.integers(len(gens)))](rng)
        tasks.append(Task(f"math-{split}-{seed}-{k:05d}", question, answer, meta))
    return TaskSet(tasks, name=f"generated math ({split}, seed {seed})")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (braces matched), or None."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
    return None


def gsm8k_answer(answer: str, where: str) -> str:
    """The final answer of a GSM8K solution: what follows ``####``, thousands commas removed."""
    m = re.search(r"####\s*(.+?)\s*$", answer.strip())
    if not m:
        raise TaskError(f"{where}: GSM8K answers must end with '#### <number>'.")
    return m.group(1).replace(",", "").strip()


def _meta(rec: Mapping[str, Any]) -> dict[str, Any]:
    """MATH's ``level``/``type``/``subject``; ``"Level 5"`` becomes 5 (evaluation groups by level)."""
    meta: dict[str, Any] = {k: rec[k] for k in ("level", "type", "subject") if k in rec}
    level = re.fullmatch(r"\s*Level\s+(\d+)\s*", str(meta.get("level", "")))
    if level:
        meta["level"] = int(level.group(1))
    return meta


def gsm8k_task(rec: Mapping[str, Any], where: str, default_id: str) -> Task:
    """A task from a GSM8K record (``question``, ``answer`` ending in ``#### N``)."""
    question = str(require(rec, "question", where))
    gold = gsm8k_answer(str(require(rec, "answer", where)), where)
    return Task(str(rec.get("id", default_id)), question, gold, _meta(rec))


def competition_math_task(rec: Mapping[str, Any], where: str, default_id: str) -> Task:
    """A task from a MATH record (``problem``, ``solution`` with ``\\boxed{...}``, optional
    ``answer`` as MATH-500 has it, ``level``, ``type``/``subject``, ``unique_id``)."""
    problem = str(require(rec, "problem", where))
    gold = rec.get("answer") or last_boxed(str(rec.get("solution", "")))
    if not gold:
        raise TaskError(f"{where}: no 'answer' field and no \\boxed{{...}} in 'solution'.")
    return Task(str(rec.get("id", rec.get("unique_id", default_id))), problem, str(gold), _meta(rec))


def math_record(rec: Mapping[str, Any], where: str, default_id: str) -> Task:
    """A task from a math record of any kind the Math env reads, in a file or in memory alike:
    MATH (``problem``), GSM8K (``question``; an ``answer`` holding a worked solution must end in
    ``#### N``, a one-line answer is the gold answer as it is), or the plain ``prompt``/``answer``."""
    if "problem" in rec:
        return competition_math_task(rec, where, default_id)
    if "question" in rec:
        answer = str(require(rec, "answer", where))
        if "####" in answer or "\n" in answer.strip():
            return gsm8k_task(rec, where, default_id)
        return Task(str(rec.get("id", default_id)), str(rec["question"]), answer.strip(), _meta(rec))
    if "prompt" in rec:
        return task_from_record(rec, where, default_id)
    raise TaskError(
        f"{where}: expected GSM8K fields (question, answer) or MATH fields (problem, solution); "
        f"fields present: {sorted(rec)[:10]}."
    )


def load_math_file(path: str | Path, split: str | None = None) -> TaskSet:
    """Load GSM8K-style or MATH-style records (:func:`math_record`) from a jsonl, json, parquet
    or arrow file or a dataset folder (:func:`prm_gym.core.records.read_records`)."""
    return load_task_set(path, math_record, split)
