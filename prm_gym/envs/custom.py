"""Bring your own tools: :func:`register_tool_env` turns plain functions into a Gymnasium env.

Example::

    from prm_gym.envs import register_tool_env

    def get_forecast(city: str, day: int) -> str:
        \"\"\"The forecast for a city.

        Args:
            city: the city name.
            day: days from today (0 = today).
        \"\"\"
        ...

    register_tool_env("mylab/Weather-v0", tools=[get_forecast], tasks="tasks.jsonl",
                      judge="rule/exact_match + 0.1*rule/format")
    env = gym.make("mylab/Weather-v0")
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from gymnasium.envs.registration import register, registry

from prm_gym.core.errors import ConfigError
from prm_gym.core.tasks import Task, TaskSet, as_task_set, read_jsonl, task_from_record
from prm_gym.core.tools import Tool
from prm_gym.envs.base import ToolEnv
from prm_gym.rewards.combine import JudgeSpec, parse_judge_spec

TaskSource = (
    str | Path | TaskSet | Iterable[Task | Mapping[str, Any]] | Callable[[], Iterable[Task | Mapping[str, Any]]]
)


def load_task_file(path: str | Path) -> TaskSet:
    """Read a generic jsonl task file.

    Each line is an object with a prompt (``prompt`` or ``question``), a gold answer
    (``answer``, ``answers`` or ``golden_answers``), an optional ``id`` and optional ``meta``.
    """
    tasks = [task_from_record(rec, f"{path}:{lineno}", f"line-{lineno}") for lineno, rec in read_jsonl(path)]
    return TaskSet(tasks, name=str(path))


class CustomToolEnv(ToolEnv):
    """An env made by :func:`register_tool_env` from plain functions.

    ## Description
    The agent solves each task by calling the registered tools over several turns, then
    submits ``<answer>...</answer>``.

    ## Action Space / Observation Space
    ``UnicodeText``, as for every prm/ env: the assistant's raw text in, the tool results out.

    ## Rewards
    The judge expression given at registration (default ``rule/exact_match + 0.1*rule/format``).

    ## Episode End
    Terminated on an answer; truncated after ``max_turns`` turns.

    ## Information
    The prm-gym info contract (``reward_<term>``, ``reward_status``, ``judge``, ``tool``, ``parse``).

    ## Arguments
    ``tools``, ``tasks``, ``judge``, ``max_turns``, ``instructions``, ``tool_timeout_s``, and
    ``split`` (passed to a tasks function that takes a ``split`` argument, so held-out
    evaluation can ask for ``split="test"``; ignored otherwise).

    ## Version History
    * v0: initial version.
    """

    def __init__(
        self,
        tools: Iterable[Callable[..., Any] | Tool],
        tasks: TaskSource,
        judge: str | JudgeSpec = "rule/exact_match + 0.1*rule/format",
        max_turns: int = 8,
        instructions: str = "When you know the answer, reply with it inside <answer></answer>.",
        tool_timeout_s: float | None = 30.0,
        split: str = "train",
        **kwargs: Any,
    ):
        source: Any = tasks
        if callable(tasks) and not isinstance(tasks, TaskSet):
            make_tasks: Callable[..., Any] = tasks
            wants_split = "split" in inspect.signature(make_tasks).parameters
            source = make_tasks(split=split) if wants_split else make_tasks()
        task_set = as_task_set(source, load_task_file, lambda: TaskSet([]))
        super().__init__(
            task_set,
            tools=[t if isinstance(t, Tool) else Tool.from_function(t) for t in tools],
            judge=judge,
            max_turns=max_turns,
            instructions=instructions,
            tool_timeout_s=tool_timeout_s,
            **kwargs,
        )


def register_tool_env(
    env_id: str,
    tools: Iterable[Callable[..., Any] | Tool],
    tasks: TaskSource,
    judge: str = "rule/exact_match + 0.1*rule/format",
    max_turns: int = 8,
    *,
    instructions: str = "When you know the answer, reply with it inside <answer></answer>.",
    tool_timeout_s: float | None = 30.0,
    nondeterministic: bool | None = None,
    overwrite: bool = False,
) -> None:
    """Register a Gymnasium env id whose agent uses ``tools`` to solve ``tasks``.

    Args:
        env_id: the id, e.g. ``"mylab/Weather-v0"``.
        tools: plain functions (sync or async) with type hints; their docstrings' summary and
            ``Args:`` become the OpenAI function schema. ``Tool`` objects are accepted too.
        tasks: a jsonl path, a list of ``Task``/dicts, a ``TaskSet``, or a function returning
            tasks (called when the env is made, with ``split=`` if it takes that argument).
        judge: a judge expression.
        max_turns: turn budget (the env truncates there; ``gym.make(env_id, max_turns=k)`` changes it, so
            no ``max_episode_steps`` is registered: Gymnasium's ``TimeLimit`` would cap it).
        instructions: appended to every task prompt.
        tool_timeout_s: a tool call taking longer is the agent's failed call (an async tool is
            cancelled, a plain function abandoned); a tool raises ``InfraError`` for an outside failure.
        nondeterministic: Gymnasium's flag; by default True when the judge expression names an LLM
            judge (``llm/...``); set it True yourself when a tool is not deterministic.
        overwrite: replace an existing registration of ``env_id``.

    Raises:
        ConfigError: the id is taken, a tool has no type hints or a type JSON cannot express,
            or the judge expression is malformed. Checked now, not at ``gym.make``.
    """
    if env_id in registry and not overwrite:
        raise ConfigError(f"env id {env_id!r} is already registered; pick another id or pass overwrite=True.")
    tool_list = [t if isinstance(t, Tool) else Tool.from_function(t) for t in tools]
    names = [t.name for t in tool_list]
    if len(set(names)) != len(names):
        raise ConfigError(f"{env_id}: two tools share a name ({names}); tool names must be unique.")
    for t in tool_list:
        if not callable(t.fn) or inspect.isclass(t.fn):
            raise ConfigError(f"{env_id}: tool {t.name!r} is not a function.")
    spec = parse_judge_spec(judge)
    if nondeterministic is None:
        nondeterministic = any(judge_id.startswith("llm/") for _, judge_id in spec.items)
    if inspect.isgenerator(tasks):
        tasks = list(cast(Iterable[Task | Mapping[str, Any]], tasks))
    if env_id in registry:
        del registry[env_id]
    register(
        id=env_id,
        entry_point="prm_gym.envs.custom:CustomToolEnv",
        nondeterministic=nondeterministic,
        kwargs={
            "tools": tool_list,
            "tasks": tasks,
            "judge": judge,
            "max_turns": max_turns,
            "instructions": instructions,
            "tool_timeout_s": tool_timeout_s,
        },
    )
