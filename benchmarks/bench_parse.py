"""How the math answer step's cost grows with the reasoning written before the answer.

Issue 25 asks that the step cost no more, as the reasoning before ``<answer>`` grows, than one
linear scan of the text. Each round times, alternated, prm/Math-v0's answer step (the unwrapped
env, ``rule/math_equiv`` only, reset outside the timer) and one ``re.search`` of
``<answer>(.*?)</answer>`` over the same text (the single regex search skyrl-gym's GSM8kEnv makes;
a lower bound for anything that reads the text), at 70, 1,000, 4,000 and 16,000 characters of
reasoning. The marginal cost is the least-squares slope of time against length, in us per 1,000
characters; the growth row divides the step at 16,000 characters by the step at 4,000 (4x is linear
in the text, 16x would be quadratic).

    .venv/bin/python benchmarks/bench_parse.py
"""

from __future__ import annotations

import re
import time

from result_line import emit, median, per_call_us, settle, spread

from prm_gym.envs.math.env import MathEnv
from prm_gym.envs.math.tasks import generate_math_tasks

LENGTHS = (70, 1_000, 4_000, 16_000)
SENTENCE = "Let me think step by step. First add the numbers, then check the sum. "
ROUNDS = 7
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def action(length: int, answer: str) -> str:
    """``length`` characters of reasoning, then the answer."""
    reasoning = (SENTENCE * (length // len(SENTENCE) + 1))[:length]
    return f"{reasoning}<answer>{answer}</answer>"


def timed_steps(env: MathEnv, text: str, task_id: str, n: int) -> float:
    """Mean us of the answer step alone over ``n`` fresh episodes of ``task_id`` (resets excluded)."""
    settle()
    total = 0.0
    for _ in range(n):
        env.reset(options={"task_id": task_id})
        t0 = time.perf_counter()
        env.step(text)
        total += time.perf_counter() - t0
    return total / n * 1e6


def slope(xs: tuple[int, ...], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` against ``xs``, per 1,000 characters."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return num / sum((x - mx) ** 2 for x in xs) * 1000


def main() -> None:
    tasks = generate_math_tasks(16, seed=5, split="test")
    env = MathEnv(tasks=tasks, judge="rule/math_equiv")
    _, info = env.reset(seed=0)
    task_id, gold = info["task_id"], str(env.task.answer)  # type: ignore[union-attr]
    texts = {n: action(n, gold) for n in LENGTHS}
    ours: dict[int, list[float]] = {n: [] for n in LENGTHS}
    regex: dict[int, list[float]] = {n: [] for n in LENGTHS}
    for rnd in range(ROUNDS + 1):  # round 0 warms up
        for n, text in texts.items():
            o = timed_steps(env, text, task_id, 2000)
            r = per_call_us(lambda text=text: ANSWER.search(text), 2000)
            if rnd:
                ours[n].append(o)
                regex[n].append(r)
    print(f"{'reasoning chars':>16} {'our step us':>12} {'one regex search us':>20}")
    for n in LENGTHS:
        print(f"{n:>16} {median(ours[n]):>12.2f} {median(regex[n]):>20.2f}")
    slopes_o = [slope(LENGTHS, [ours[n][i] for n in LENGTHS]) for i in range(ROUNDS)]
    slopes_r = [slope(LENGTHS, [regex[n][i] for n in LENGTHS]) for i in range(ROUNDS)]
    so, sr = median(slopes_o), median(slopes_r)
    print(f"marginal cost per 1,000 characters: ours {so:.2f} us, one regex search {sr:.2f} us")
    cond = f"medians of {ROUNDS} alternated rounds of 2,000 calls each, the same texts"
    emit(
        "parse",
        "math answer step: marginal cost per 1,000 characters of reasoning",
        so,
        sr,
        f"one re.search of <answer>(.*?)</answer> over the same text (skyrl-gym's single regex); {cond}; "
        "least-squares slope over 70-16,000 characters",
        "us per 1k chars",
        "lower",
        f"ours {spread(slopes_o)}, regex {spread(slopes_r)}",
        "not a peer: one regex search is a lower bound for any parse that reads the text; ours also "
        "balances tags, strips think blocks and looks for tool calls in the same pass",
    )
    growth = [ours[16_000][i] / ours[4_000][i] for i in range(ROUNDS)]
    emit(
        "parse",
        "math answer step: growth from 4,000 to 16,000 characters of reasoning",
        median(growth),
        4.0,
        f"4x, the growth of a linear scan (a quadratic one grows 16x); {cond}",
        "x",
        "lower",
        spread(growth),
        "the fixed per-step cost makes a linear step grow by less than 4x",
    )


if __name__ == "__main__":
    main()
