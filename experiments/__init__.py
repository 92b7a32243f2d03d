"""Studies run from the repository root (``python -m experiments.<name>``), outside the library:
``demo`` (make demo), ``learn`` (make learn), ``compare`` (make compare*), ``gpu_learn``."""

import argparse
import copy


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``--help`` of every study: the module docstring as written, and each option's default (unless its
    help already states one, or it has none: ``None``, a flag's ``False``)."""

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and _shows_default(action):
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").strip()
        if _shows_default(action) and "default" not in text:
            text = f"{text} (default: %(default)s)".strip()
        return text


def _shows_default(action: argparse.Action) -> bool:
    default = action.default
    flag = action.nargs == 0
    return bool(action.option_strings) and default not in (None, argparse.SUPPRESS) and not flag
