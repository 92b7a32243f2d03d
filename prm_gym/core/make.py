"""``gym.make`` for the command-line tools, with keyword arguments the env rejects reported as the user's.

``train-agent --env-kwargs '{"levles": [1]}'`` made the env raise ``TypeError: ToolEnv.__init__() got an
unexpected keyword argument`` as a traceback; ``'{"max_turns": "3"}'`` raised a comparison's ``TypeError``
from inside the constructor. Both are the caller's configuration: :func:`make_env` turns them into a
:class:`~prm_gym.core.errors.ConfigError` naming the env id and the keywords given.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from prm_gym.core.errors import ConfigError


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make(env_id, **kwargs)``.

    Raises:
        ConfigError: the env's constructor raised ``TypeError`` or ``ValueError`` for the keyword
            arguments given (with none given, such an error is a bug and is raised as it is).
    """
    try:
        return gym.make(env_id, **kwargs)
    except (TypeError, ValueError) as exc:
        if not kwargs or isinstance(exc, UnicodeError):
            raise
        raise ConfigError(f"{env_id} with keyword arguments {sorted(kwargs)}: {exc}") from exc
