"""Progress bars on stderr for everything a user waits on: evaluation, index builds, exports,
task generation, model loading.

One switch for all of them, the ``PRM_GYM_PROGRESS`` environment variable:

* unset or ``auto``: a bar shows when stderr is a terminal, and only once the work has taken
  ``delay`` seconds (quick work prints nothing);
* ``0`` / ``off`` / ``false`` / ``no``: never;
* ``1`` / ``on`` / ``true`` / ``yes`` / ``always``: always, from the start, even into a file or a pipe.

Commands add their own flag on top (``train-agent --no-progress``, ``prm-export --no-progress``),
passed here as ``enabled``. Bars are tqdm's (the ``train`` extra); without tqdm nothing is shown.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

try:  # tqdm comes with the train extra; a bare install (envs only) shows no bars
    from tqdm import tqdm as _tqdm
except ImportError:  # pragma: no cover - exercised only without the extra
    _tqdm = None

ENV_VAR = "PRM_GYM_PROGRESS"
_OFF = {"0", "off", "false", "no"}
_ON = {"1", "on", "true", "yes", "always"}
T = TypeVar("T")


def mode() -> str:
    """``"off"``, ``"on"`` or ``"auto"``, from ``PRM_GYM_PROGRESS`` (anything else is ``auto``)."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    return "off" if value in _OFF else "on" if value in _ON else "auto"


class _Silent:
    """What :func:`bar` returns when no bar is shown: the same methods, doing nothing."""

    n = 0

    def update(self, n: float = 1) -> None:
        pass

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_description_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def shown(enabled: bool = True) -> bool:
    """Whether a bar would be drawn now (the command's flag, the env variable, a terminal, tqdm)."""
    m = mode()
    if _tqdm is None or not enabled or m == "off":
        return False
    return m == "on" or sys.stderr.isatty()


def bar(
    total: float | None = None,
    desc: str = "",
    unit: str = "it",
    *,
    enabled: bool = True,
    delay: float = 2.0,
    **tqdm_kwargs: Any,
) -> Any:
    """A tqdm bar on stderr, or a silent stand-in when bars are off (see the module docstring).

    Args:
        total: the amount of work (None: unknown, a counter is shown).
        desc: what is being waited for, e.g. ``"eval"``, ``"BM25 index"``.
        unit: what one update counts (``"episode"``, ``"doc"``, ``"task"``).
        enabled: the command's own switch (``--no-progress`` passes False).
        delay: in ``auto`` mode, seconds of work before the bar appears.
        tqdm_kwargs: more tqdm arguments (``initial``, ``leave``: by default a finished bar is erased).
    """
    if not shown(enabled):
        return _Silent()
    assert _tqdm is not None
    return _tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        delay=0.0 if mode() == "on" else delay,
        dynamic_ncols=True,
        **{"leave": False, **tqdm_kwargs},
    )


def track(items: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it", **kwargs: Any) -> Iterator[T]:
    """``items`` one by one, with a :func:`bar` counting them (no overhead when bars are off)."""
    if not shown(kwargs.get("enabled", True)):
        yield from items
        return
    with bar(total if total is not None else _len(items), desc, unit, **kwargs) as b:
        for item in items:
            yield item
            b.update(1)


def _len(items: Iterable[Any]) -> int | None:
    try:
        return len(items)  # type: ignore[arg-type]
    except TypeError:
        return None
