"""A CPU-only check that every tensor the project makes names its device, and a count of host syncs.

The test suite never sees a GPU, so a tensor made on the CPU and then mixed with the model's
(``torch.arange(n)`` concatenated with a CUDA tensor) passes every CPU test and crashes on the first
GPU rollout. :func:`device_guard` catches it on a CPU: inside it, a tensor factory called from the
project's own code (``prm_gym/``, ``experiments/``) without ``device=`` raises
:class:`DeviceGuardError` naming the file and line. An explicit ``device=`` passes, whatever it
names: ``device="cpu"`` is a statement that the tensor is host bookkeeping (a CPU generator's draw),
``device=model_device`` that it follows the model. ``*_like`` and ``new_*`` follow their input
and always pass.

It also counts the calls that force a GPU to finish its queued work before the host can go on
(``.tolist()``, ``.item()``, ``.cpu()``, ``bool(t)``, ``t.nonzero()``, ...) by the file that made
them, so a test can bound the host syncs of the sampler's token loop without a GPU.

Example::

    with device_guard() as guard:
        policy.generate(prompts, params)
    assert guard.syncs["prm_gym/agents/hf.py"] <= steps // 8 + 4
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prm_gym.core.errors import PRMError

FACTORIES = frozenset(
    {
        "tensor",
        "as_tensor",
        "asarray",
        "arange",
        "range",
        "linspace",
        "logspace",
        "zeros",
        "ones",
        "full",
        "empty",
        "eye",
        "rand",
        "randn",
        "randint",
        "randperm",
        "normal",
        "tril_indices",
        "triu_indices",
    }
)
"""torch functions that make a tensor from nothing: where it lives is the caller's ``device=``."""

SYNCS = frozenset({"tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero"})
"""Tensor methods that make a GPU finish its queued work before the host goes on."""

ROOTS = (Path(__file__).resolve().parents[1], Path(__file__).resolve().parents[2] / "experiments")
"""The code whose factory calls are checked: the ``prm_gym`` package and the studies."""


class DeviceGuardError(PRMError):
    """A tensor factory in the project's code did not say which device its tensor goes on."""


def _relative(filename: str, roots: tuple[Path, ...]) -> str | None:
    """``filename`` relative to the repository (``prm_gym/agents/hf.py``) if it is under ``roots``."""
    for root in roots:
        prefix = str(root) + "/"
        if filename.startswith(prefix):
            return f"{root.name}/{filename[len(prefix) :]}"
    return None


class DeviceGuard:
    """What :func:`device_guard` saw: ``syncs`` counts host syncs by file (repository-relative)."""

    def __init__(self) -> None:
        self.syncs: Counter[str] = Counter()
        self.factories: Counter[str] = Counter()


@contextmanager
def device_guard(roots: tuple[Path, ...] = ROOTS) -> Iterator[DeviceGuard]:
    """Raise :class:`DeviceGuardError` at any tensor factory called from ``roots`` without
    ``device=``, and count host syncs by file, for the duration of the block (this thread)."""
    from torch.overrides import TorchFunctionMode

    seen = DeviceGuard()

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name in FACTORIES or name in SYNCS:
                frame = sys._getframe(1)
                where = _relative(frame.f_code.co_filename, roots)
                if where is not None and name in SYNCS:
                    seen.syncs[where] += 1
                elif where is not None and _is_factory(func, name):
                    if "device" not in kwargs:
                        raise DeviceGuardError(
                            f"{where}:{frame.f_lineno}: torch.{name}(...) names no device; pass device= "
                            "(the model's device, or 'cpu' for host bookkeeping)"
                        )
                    seen.factories[where] += 1
            return func(*args, **kwargs)

    with Mode():
        yield seen


def _is_factory(func: Any, name: str) -> bool:
    """Whether ``func`` is the module-level ``torch.<name>`` (not a Tensor method of that name)."""
    import torch

    return getattr(torch, name, None) is func
