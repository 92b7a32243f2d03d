"""prm-gym environments. Importing this package registers every ``prm/`` id with Gymnasium.

Only the registrations, the error hierarchy and the text space are imported eagerly; the public
classes (``ToolEnv``, ``Task``, ``register_tool_env``, ...) load on first access, so that
``rewards`` and ``envs`` can import each other's small modules without a cycle.
"""

from __future__ import annotations

import importlib
from typing import Any

from gymnasium.envs.registration import register, registry

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

_LAZY = {
    "ToolEnv": "envs.base",
    "register_tool_env": "envs.custom",
    "Task": "envs.tasks",
    "TaskSet": "envs.tasks",
    "Tool": "envs.tools",
    "ToolResult": "envs.tools",
}

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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envs' has no attribute {name!r}")


_ENVS = {
    "prm/Math-v0": ("envs.math:MathEnv", 6),
    "prm/Code-v0": ("envs.code:CodeEnv", 8),
    "prm/SQL-v0": ("envs.sql:SQLEnv", 8),
    "prm/Search-v0": ("envs.search:SearchEnv", 4),
}

for _id, (_entry, _turns) in _ENVS.items():
    if _id not in registry:
        register(id=_id, entry_point=_entry, max_episode_steps=_turns, kwargs={"max_turns": _turns})
