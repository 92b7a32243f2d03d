"""A registered test env for the env server's tests (test/Flaky-v0). It lives in a module of its
own, importing little, because the server's worker processes import it to make the env."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import register

from prm_gym.core.tasks import Task, TaskSet
from prm_gym.envs.base import ToolEnv


class FlakyEnv(ToolEnv):
    """A ToolEnv whose step crashes on ``crash``, sleeps on ``slow``, sleeps forever on ``hang``,
    holds the GIL forever on ``spin``, and adds NumPy and NaN to info. Its envs live in the
    server's worker processes, so each ``close()`` appends a line to ``close_log``."""

    def __init__(self, num_tasks: int = 3, close_log: str | None = None, **kwargs: Any):
        tasks = TaskSet([Task(f"t{i}", f"say {i}", str(i), {"level": i % 2 + 1}) for i in range(num_tasks)])
        super().__init__(tasks, judge="rule/exact_match", **kwargs)
        self.close_log = close_log

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action == "crash":
            raise RuntimeError("the env's backend exploded")
        if action == "slow":
            time.sleep(1.5)
        if action == "hang":
            threading.Event().wait()
        if action == "spin":
            sum(range(10**13))  # one C call: the GIL is never released
        obs, reward, terminated, truncated, info = super().step(action)
        info["diag"] = {"f32": np.float32(0.5), "nan": math.nan, "inf": -math.inf, "i64": np.int64(3)}
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        if not self._closed and self.close_log:
            with open(self.close_log, "a") as f:
                f.write("closed\n")
        super().close()


def closed(log: Path) -> int:
    """How many FlakyEnvs wrote ``log`` on close."""
    return len(log.read_text().splitlines()) if log.exists() else 0


if "test/Flaky-v0" not in gym.registry:
    register(id="test/Flaky-v0", entry_point=FlakyEnv, max_episode_steps=4)
