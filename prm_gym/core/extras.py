"""Optional dependencies: one message, naming the extra to install, wherever one is missing.

Each optional import site calls :func:`require` (a lazy import) or re-raises through
:func:`missing_extra` (a module-level import), so a user without the extra reads one line::

    the SQL judges: sqlglot is not installed; pip install 'prm-gym[sql]'
"""

from __future__ import annotations

import importlib
from types import ModuleType

from prm_gym.core.errors import MissingExtraError


def missing_extra(exc: ImportError, extra: str, feature: str) -> MissingExtraError:
    """The error to raise (``from None``) in place of ``exc`` when ``feature`` needs the ``extra``.

    Args:
        exc: the ``ImportError`` the import raised.
        extra: the prm-gym extra that installs the module, e.g. ``"sql"``.
        feature: what needs it, e.g. ``"the SQL judges"``.
    """
    name = (exc.name or "").split(".")[0] or "a module"
    advice = f"pip install 'prm-gym[{extra}]'"
    if isinstance(exc, ModuleNotFoundError):
        message = f"{feature}: {name} is not installed; {advice}"
    else:  # the module is there but failed to import (a broken install, a missing library)
        message = f"{feature}: importing {name} failed ({type(exc).__name__}: {exc}); reinstall it: {advice}"
    err = MissingExtraError(message)
    err.name = exc.name
    return err


def require(module: str, extra: str, feature: str) -> ModuleType:
    """``importlib.import_module(module)``, or :class:`MissingExtraError` naming the ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(exc, extra, feature) from None
