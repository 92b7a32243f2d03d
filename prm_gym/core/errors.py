"""The one exception hierarchy of prm-gym.

Every error the suite raises on purpose derives from :class:`PRMError`, so a caller can
catch the suite's failures without catching programming errors.
"""

from __future__ import annotations


class PRMError(Exception):
    """Base class of every error raised on purpose by prm-gym."""


class ConfigError(PRMError, ValueError):
    """A configuration value is wrong; the message names the field and the fix."""


class TaskError(PRMError, ValueError):
    """A task file or task record is malformed; the message names the file and line."""


class ToolError(PRMError):
    """A tool rejected its arguments or failed because of the agent's input.

    This is the agent's fault and is shown to the agent as the tool result.
    """


class InfraError(PRMError):
    """Infrastructure failed (judge, sandbox, retriever, server).

    Never the agent's fault: the env flags the turn ``reward_status="infra_error"``.
    """


class JudgeError(InfraError):
    """A judge timed out, failed, or returned an unparseable or non-finite verdict."""


class SandboxError(InfraError):
    """The sandbox could not start or was killed by the host."""


class RetrievalError(InfraError):
    """The retrieval backend is down, slow, or returned garbage."""


class MissingExtraError(PRMError, ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra that brings it.

    Also a ``ModuleNotFoundError``, so code that falls back when a module is absent still does.
    """
