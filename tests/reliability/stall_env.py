"""``test/StallMath-v0``: prm/Math-v0 whose first step anywhere stalls, so a test can kill the
process playing it mid-step (a Ray rollout worker, an env server's worker).

With ``$PRM_TEST_STALL_DIR`` set, the first training ``step`` (split ``train``) in any process (the one that creates
``<dir>/stalled``, holding its pid) sleeps ``$PRM_TEST_STALL_S`` seconds (default 30) before
stepping; every other step runs at once. Imported with ``--imports tests.reliability.stall_env``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from prm_gym.envs.math.env import MathEnv

ENV_ID = "test/StallMath-v0"
STALL_DIR = "PRM_TEST_STALL_DIR"
STALL_S = "PRM_TEST_STALL_S"


class StallMathEnv(MathEnv):
    """A real Math env; the first training step of all (across processes) writes its pid and stalls."""

    def __init__(self, *args: Any, split: str = "train", **kwargs: Any) -> None:
        super().__init__(*args, split=split, **kwargs)
        self.stall_split = split

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        where = os.environ.get(STALL_DIR)
        if where and self.stall_split == "train":
            try:
                fd = os.open(Path(where) / "stalled", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                time.sleep(float(os.environ.get(STALL_S, "30")))
        return super().step(action)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=StallMathEnv, kwargs={"num_tasks": 20, "max_turns": 2})
