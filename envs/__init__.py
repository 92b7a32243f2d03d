"""prm-gym environments. Importing this package registers every ``prm/`` id with Gymnasium."""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

from envs.base import ToolEnv
from envs.custom import register_tool_env
from envs.errors import (
    ConfigError,
    InfraError,
    JudgeError,
    PRMError,
    RetrievalError,
    SandboxError,
    TaskError,
    ToolError,
    ToolParseError,
)
from envs.spaces import UnicodeText
from envs.tasks import Task, TaskSet
from envs.tools import Tool, ToolResult

__all__ = [
    "ConfigError",
    "InfraError",
    "JudgeError",
    "PRMError",
    "RetrievalError",
    "SandboxError",
    "Task",
    "TaskError",
    "TaskSet",
    "Tool",
    "ToolEnv",
    "ToolError",
    "ToolParseError",
    "ToolResult",
    "UnicodeText",
    "register_tool_env",
]

_ENVS = {
    "prm/Math-v0": ("envs.math:MathEnv", 6),
    "prm/Code-v0": ("envs.code:CodeEnv", 8),
    "prm/SQL-v0": ("envs.sql:SQLEnv", 8),
    "prm/Search-v0": ("envs.search:SearchEnv", 4),
}

for _id, (_entry, _turns) in _ENVS.items():
    if _id not in registry:
        register(id=_id, entry_point=_entry, max_episode_steps=_turns, kwargs={"max_turns": _turns})
