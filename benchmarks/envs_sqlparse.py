"""The SQL rows' parse figures for bench_envs.py: which sqlglot build ran, what its parse of the
submitted query costs alone, and where the default-judge step stands against issue #25's goal."""

from __future__ import annotations

import time
from importlib.metadata import PackageNotFoundError, version

import sqlglot.parser
from fresh_text import fresh_sql
from result_line import settle

from prm_gym.envs.sql.shape import normalise_sql, parse_shape

#: Issue #25: the default-judge SQL step at least this many times faster than skyrl-gym's final step.
GOAL = 3.0


def sqlglot_build() -> str:
    """``"sqlglot 30.30.0, compiled (sqlglotc)"`` or ``"... pure Python (no sqlglotc)"``."""
    compiled = not str(sqlglot.parser.__file__).endswith(".py")
    try:
        release = version("sqlglot")
    except PackageNotFoundError:
        release = "?"
    return f"sqlglot {release}, " + ("compiled (sqlglotc)" if compiled else "pure Python (no sqlglotc)")


def shape_pass(answers: list[str], rep: int) -> float:
    """Mean microseconds of one parse of a submitted query (what the default judges share), each
    call on a query text no earlier call used, as in the timed steps. bench_envs runs one such pass
    in each round of its alternated passes, so the parse and the steps see the same load."""
    texts = [normalise_sql(fresh_sql(a, f"shape_r{rep}_{i}")) for i, a in enumerate(answers)]
    settle()
    t0 = time.perf_counter()
    for text in texts:
        parse_shape(text)
    return (time.perf_counter() - t0) / len(texts) * 1e6


def goal_note(ours_us: float, theirs_us: float, shape_us: float, outcome_us: float = 0.0) -> str:
    """Where the default-judge step stands against :data:`GOAL`, and what the parse costs of it.

    ``outcome_us`` is our step with execution match alone (same run): with the one parse it is the
    floor under any default-judge step that keeps the parse-based partial credit.
    """
    ratio = theirs_us / ours_us
    build = sqlglot_build()
    cost = f"the one sqlglot parse of the query alone takes {shape_us:.0f} us of our {ours_us:.0f} us ({build})"
    if ratio >= GOAL:
        return f"goal {GOAL:g}x (#25) met; {cost}"
    rest = ours_us - shape_us
    needed = theirs_us / GOAL
    missed = f"goal {GOAL:g}x (#25) missed by {GOAL / ratio:.2f}x (needs {needed:.0f} us); {cost}"
    if rest <= 0:
        return missed
    note = (
        f"{missed}: the parse is what the syntax and schema-link partial credit read (skyrl-gym gives none); "
        f"the step without it is {rest:.0f} us ({theirs_us / rest:.1f}x)"
    )
    floor = outcome_us + shape_us
    if outcome_us and floor > needed:
        note += (
            f". A library limit, measured: the execution-match-only step ({outcome_us:.0f} us) plus the one "
            f"parse ({shape_us:.0f} us) is {floor:.0f} us, over the {needed:.0f} us the goal allows, before any "
            "partial-credit judge runs"
        )
    return note
