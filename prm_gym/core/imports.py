"""``--imports``: the modules a user names on the command line (they register envs or judges).

A console script (``train-agent``, ``prm-play``, ``prm-export``, ``prm-serve``) does not search the
current folder for modules, as ``python -m`` does; a module saved there (``convert_tools.py``) is
found anyway, after the installed ones, so the docs' commands run as written from that folder.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable

from prm_gym.core.errors import ConfigError


def import_modules(modules: Iterable[str], flag: str = "--imports") -> None:
    """Import each of ``modules`` (installed, on ``PYTHONPATH``, or in the current folder).

    Raises:
        ConfigError: one does not import (the message names it, the flag and why).
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            here = os.getcwd()
            top = module.split(".")[0]
            if exc.name != top or here in sys.path:
                raise ConfigError(f"{flag} {module}: {exc}") from exc
            sys.path.append(here)  # after the installed modules: a file here never shadows them
            try:
                importlib.import_module(module)
            except ImportError as again:
                raise ConfigError(f"{flag} {module}: {again} (looked on sys.path and in {here})") from again
        except ImportError as exc:
            raise ConfigError(f"{flag} {module}: {exc}") from exc
