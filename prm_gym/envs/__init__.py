"""prm-gym environments: ``ToolEnv`` (the multi-turn loop and info contract), one env per tool
family, and :func:`register_tool_env` for your own tools.

The ``prm/`` ids are registered by the parent package (``import prm_gym``), which importing
this one imports first.
"""

from __future__ import annotations

from prm_gym.core.errors import (
    ConfigError,
    InfraError,
    JudgeError,
    PRMError,
    RetrievalError,
    SandboxError,
    TaskError,
    ToolError,
)
from prm_gym.core.spaces import UnicodeText
from prm_gym.core.tasks import Task, TaskSet
from prm_gym.core.tools import Tool, ToolResult
from prm_gym.envs.base import ToolEnv
from prm_gym.envs.custom import register_tool_env

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
    "ToolResult",
    "UnicodeText",
    "register_tool_env",
]
