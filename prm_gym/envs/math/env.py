"""prm/Math-v0: multi-turn math with a calculator tool."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from prm_gym.core.tasks import Task, TaskSet, as_task_set
from prm_gym.core.tools import Tool
from prm_gym.envs.base import ToolEnv
from prm_gym.envs.datasets import file_loader
from prm_gym.envs.math.calculator import evaluate
from prm_gym.envs.math.tasks import generate_math_tasks, load_math_file, math_record
from prm_gym.rewards.combine import JudgeSpec


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly as written.

    Args:
        expression: numbers with + - * / // % ** and parentheses, e.g. "12 * (3 + 4)".
    """
    return evaluate(expression)


class MathEnv(ToolEnv):
    """Solve a math word problem, optionally using a calculator, then submit one answer.

    ## Description
    Each episode is one problem. On every turn the agent either calls the ``calculator``
    tool (Hermes-style ``<tool_call>{"name": "calculator", "arguments": {"expression": "..."}}</tool_call>``)
    or submits its final answer as ``<answer>...</answer>``, which ends the episode.

    ## Action Space
    ``UnicodeText(32768)``: the assistant's raw text for the turn. ``<think>`` blocks are ignored.

    ## Observation Space
    ``UnicodeText``: the problem and answer instructions at ``reset``; afterwards the calculator
    results in ``<tool_response>`` blocks, or a format-error message.

    ## Rewards
    The default judge is ``"rule/math_equiv + 0.1*rule/format + 0.1*rule/tool"``:
    ``reward_outcome`` is 1 when the submitted answer equals the gold answer (math-verify,
    exact for plain numbers) and 0 otherwise; ``reward_format`` is -0.1 on a turn that does not
    parse; ``reward_tool`` is -0.1 times the fraction of failed calculator calls.

    ## Episode End
    Terminated when an answer is submitted. Truncated after ``max_turns`` turns.

    ## Information
    ``task_id``, ``turn``, ``answer``, ``reward_<term>`` per term, ``reward_status``,
    ``judge`` (per judge ``score``), ``parse`` (``ok``, ``issues``), ``tool`` (``calls``,
    ``failed``, ``ok``, ``name``, ``latency_s``); ``reset`` adds ``tools`` (OpenAI schemas).

    ## Arguments
    * ``tasks``: None for generated problems; a GSM8K/MATH file (jsonl, json, parquet, arrow) or
      dataset folder; ``"dataset:gsm8k:<path>"`` / ``"dataset:math:<path>"``
      (:mod:`prm_gym.envs.datasets`); a list of Tasks or of dicts with the same fields; a TaskSet.
    * ``split``: the generator's split, and the split read from a dataset folder holding several.
    * ``num_tasks``, ``task_seed``, ``levels``: the generator's settings (levels 1-4; 5 and 6 are
      word problems in 72 phrasings needing one, or two to three, calculator calls).
    * ``templates``: which word-problem phrasings levels 5-6 use: ``"train"``, ``"held_out"``
      (never trained on) or ``"all"``, in the split ``heldout_seed`` picks: None (default) the
      legacy split, 30 training and 12 held-out templates; an int, 36 training and 36 held-out
      (each half one-call, half multi-call), which ones rotating with it
      (:func:`prm_gym.envs.math.words.held_out_ids`).
    * ``judge``: a judge expression; ``max_turns``: the turn budget (default 6).

    ## Version History
    * v0: initial version.
    """

    def __init__(
        self,
        tasks: TaskSet | str | Path | Iterable[Task | dict[str, Any]] | None = None,
        *,
        split: str = "train",
        num_tasks: int = 1000,
        task_seed: int = 0,
        levels: Sequence[int] = (1, 2, 3),
        templates: str = "train",
        heldout_seed: int | None = None,
        judge: str | JudgeSpec = "rule/math_equiv + 0.1*rule/format + 0.1*rule/tool",
        max_turns: int = 6,
        **kwargs: Any,
    ):
        task_set = as_task_set(
            tasks,
            file_loader("prm/Math-v0", split, load_math_file),
            lambda: generate_math_tasks(num_tasks, task_seed, split, levels, templates, heldout_seed),
            math_record,
        )
        super().__init__(
            task_set,
            tools=[Tool.from_function(calculator)],
            judge=judge,
            max_turns=max_turns,
            instructions=(
                "You may call the calculator tool. When you know the result, reply with the final "
                "answer alone inside <answer></answer>, e.g. <answer>42</answer>."
            ),
            **kwargs,
        )
