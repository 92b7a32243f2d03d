"""A seeded generator of small programming tasks, with reference solutions and tests written here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from prm_gym.core.progress import track
from prm_gym.core.tasks import Task, TaskSet, generated_once

# Each family: rng -> (description, entry point, reference source, test inputs).
Family = Callable[[np.random.Generator], tuple[str, str, str, list[tuple[Any, ...]]]]


def _ints(rng: np.random.Generator, n: int, lo: int = -20, hi: int = 20) -> list[int]:
    return [int(x) for x in rng.integers(lo, hi, size=n)]


def _words(rng: np.random.Generator) -> str:
    vocab = ["apple", "Level", "sky", "data", "noon", "river", "a", "code", "Racecar", "stone"]
    return " ".join(vocab[int(i)] for i in rng.integers(0, len(vocab), size=int(rng.integers(0, 6))))


def sum_multiples(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    k = int(rng.integers(2, 8))
    desc = f"Return the sum of all non-negative integers below n that are divisible by {k}."
    src = f"def sum_multiples(n):\n    return sum(i for i in range(max(n, 0)) if i % {k} == 0)\n"
    return desc, "sum_multiples", src, [(int(n),) for n in rng.integers(0, 200, size=5)] + [(0,)]


def running_max(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    desc = "Return a list whose i-th element is the largest of xs[0..i] (empty in, empty out)."
    src = (
        "def running_max(xs):\n    out = []\n    for x in xs:\n"
        "        out.append(x if not out else max(out[-1], x))\n    return out\n"
    )
    return desc, "running_max", src, [(_ints(rng, int(rng.integers(0, 8))),) for _ in range(5)] + [([],)]


def rotate(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    desc = "Rotate the list xs to the right by k places (k may exceed len(xs); empty stays empty)."
    src = "def rotate(xs, k):\n    if not xs:\n        return []\n    k %= len(xs)\n    return xs[-k:] + xs[:-k]\n"
    cases = [(_ints(rng, int(rng.integers(0, 7))), int(rng.integers(0, 10))) for _ in range(5)]
    return desc, "rotate", src, [*cases, ([], 3)]


def count_palindromes(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    desc = "Count the words of the space-separated string s that read the same backwards, ignoring case."
    src = "def count_palindromes(s):\n    return sum(w.lower() == w.lower()[::-1] for w in s.split())\n"
    return desc, "count_palindromes", src, [(_words(rng),) for _ in range(6)]


def digit_power_sum(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    p = int(rng.integers(1, 4))
    desc = f"Return the sum of the decimal digits of the integer n (ignore its sign), each raised to the power {p}."
    src = f"def digit_power_sum(n):\n    return sum(int(d) ** {p} for d in str(abs(n)))\n"
    return desc, "digit_power_sum", src, [(int(n),) for n in rng.integers(-(10**6), 10**6, size=6)]


def label(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    a, b = (int(x) for x in rng.choice(np.arange(2, 8), size=2, replace=False))
    desc = (
        f"Return 'FizzBuzz' if n is divisible by both {a} and {b}, 'Fizz' if only by {a}, "
        f"'Buzz' if only by {b}, and str(n) otherwise."
    )
    src = (
        f"def label(n):\n    if n % {a} == 0 and n % {b} == 0:\n        return 'FizzBuzz'\n"
        f"    if n % {a} == 0:\n        return 'Fizz'\n    if n % {b} == 0:\n        return 'Buzz'\n"
        "    return str(n)\n"
    )
    return desc, "label", src, [(n,) for n in [a, b, a * b, 1, *(int(x) for x in rng.integers(1, 100, size=3))]]


def second_largest(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    desc = "Return the second largest distinct value in xs, or None when there are fewer than two."
    src = "def second_largest(xs):\n    vals = sorted(set(xs))\n    return vals[-2] if len(vals) > 1 else None\n"
    return desc, "second_largest", src, [(_ints(rng, int(rng.integers(0, 7)), 0, 6),) for _ in range(6)]


FAMILIES: tuple[Family, ...] = (
    sum_multiples,
    running_max,
    rotate,
    count_palindromes,
    digit_power_sum,
    label,
    second_largest,
)


def make_task(task_id: str, rng: np.random.Generator) -> Task:
    """One generated task: a family drawn from ``rng``, its tests computed from the reference."""
    desc, entry, src, inputs = FAMILIES[int(rng.integers(len(FAMILIES)))](rng)
    namespace: dict[str, Any] = {}
    exec(compile(src, f"<reference {entry}>", "exec"), namespace)  # our own reference code
    ref = namespace[entry]
    cases = [f"assert {entry}({', '.join(map(repr, args))}) == {ref(*args)!r}" for args in inputs]
    signature = src.splitlines()[0]
    prompt = f"Write a Python function `{signature[4:-1]}`.\n{desc}"
    meta = {
        "entry_point": entry,
        "setup": "",
        "arg": "candidate",
        "cases": cases,
        "prompt_code": "",
        "source": "generated",
    }
    return Task(task_id, prompt, src, meta)


@generated_once()
def generate_code_tasks(num_tasks: int = 500, seed: int = 0, split: str = "train") -> TaskSet:
    """``num_tasks`` generated tasks; the same ``(seed, split)`` gives the same tasks.

    Generated once per process for each set of arguments and shared (read-only ``meta``).
    """
    rng = np.random.default_rng([seed, {"train": 0, "test": 1, "validation": 2}.get(split, 3)])
    tasks = [make_task(f"gen-{split}-{i}", rng) for i in track(range(num_tasks), desc="code tasks", unit="task")]
    return TaskSet(tasks, name=f"generated-{split}")
