"""argparse types the command-line tools share: a bad number is the usage error (exit 2), not a traceback
or a surprise (``--episodes -1`` sliced a task list from its end; ``--port 99999`` was an OverflowError)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)


def _number(text: str, cast: Callable[[str], N], ok: Callable[[N], bool], why: str) -> N:
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid {getattr(cast, '__name__', 'number')} value: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{why}, got {text}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _number(text, int, lambda v: v >= 1, "must be at least 1")


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number of at least 0 (a sampling temperature)."""
    return _number(text, float, lambda v: v >= 0.0 and math.isfinite(v), "must be a finite number >= 0")


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: the system picks a free one)."""
    return _number(text, int, lambda v: 0 <= v <= 65535, "a port is 0 to 65535")
