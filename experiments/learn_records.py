"""Where ``make learn`` keeps its evaluations (no torch): the models, held-out sets and decodings,
and the file each ``(model, set, mode)`` evaluation is cached in. Shared by ``experiments.learn``,
which writes them, and ``experiments.learn_seeds``, which reads them across seeds."""

from __future__ import annotations

from pathlib import Path

MODELS = ("fewshot", "sft", "sft_cont", "rft", "grpo")
"""The arms; ``sft_cont`` (SFT continued for GRPO's updates, its control) is absent from runs before it."""
SETS = ("numbers", "templates")
MODES = ("greedy", "sampled")


def record_key(model: str, which: str, mode: str) -> str:
    """``"<model>-<set>-<mode>"``: the key of one evaluation in summaries and the stem of its file."""
    return f"{model}-{which}-{mode}"


def record_file(folder: Path, model: str, which: str, mode: str) -> Path:
    """The JSON file (a list of per-task records) holding one evaluation in ``folder``."""
    return folder / f"{record_key(model, which, mode)}.json"
