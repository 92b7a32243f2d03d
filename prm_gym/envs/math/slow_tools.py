"""prm/MathSlowTools-v0: prm/Math-v0 whose calculator calls take a seeded, heavy-tailed time.

A benchmark workload, not a default: real tools (a search API, a sandboxed program, a database)
answer in a time whose distribution has a long right tail, so a synchronous trainer waits on the
slowest episode of every step. This env sleeps, inside each tool call, a log-normal time drawn
from a generator seeded by ``(latency_seed, task id, turn, call)``: the same call in the same
episode always takes the same time, whatever thread or run plays it. Replayed calls (``fork``)
reuse the recorded result and do not sleep.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from typing import Any

import numpy as np

from prm_gym.core.errors import ConfigError
from prm_gym.core.tools import Tool
from prm_gym.envs.math.env import MathEnv


def tool_delay(seed: int, task_id: str, turn: int, call: str, median_s: float, sigma: float, max_s: float) -> float:
    """Seconds the tool call ``call`` (its name and arguments as text) sleeps.

    ``median_s * exp(sigma * z)`` with ``z ~ N(0, 1)`` drawn from ``(seed, task_id, turn, call)``,
    capped at ``max_s``.
    """
    if median_s <= 0:
        return 0.0
    rng = np.random.default_rng([seed, zlib.crc32(task_id.encode()), turn, zlib.crc32(call.encode())])
    return min(median_s * math.exp(sigma * float(rng.standard_normal())), max_s)


class SlowToolsMathEnv(MathEnv):
    """prm/Math-v0 with a seeded log-normal sleep in every calculator call.

    ## Description
    The workload of ``make compare-async``: prm/Math-v0 whose calculator calls take a seeded,
    heavy-tailed time, as real tool calls do (see the module docstring). Not a default env. The sleeps
    count against the turn's ``turn_budget_s`` (20 s): at the default latency a turn almost never
    reaches it, but with a larger ``latency_median_s`` the calls left when it is spent are not run,
    and which ones depends on the machine's load; pass ``turn_budget_s=None`` to run them all.

    ## Rewards
    Those of prm/Math-v0.

    ## Episode End
    As prm/Math-v0.

    ## Information
    As prm/Math-v0; a tool call's ``latency_s`` includes the sleep.

    ## Arguments
    Those of prm/Math-v0, and:

    * ``latency_median_s``: median seconds a call sleeps (0: no sleep, plain prm/Math-v0).
    * ``latency_sigma``: log-normal shape; 1.2 gives a mean of 2.05x the median and a p99 of ~16x.
    * ``latency_max_s``: the longest sleep (a tool's own deadline).
    * ``latency_seed``: seed of the draws.

    ## Version History
    * v0: initial version.
    """

    def __init__(
        self,
        *args: Any,
        latency_median_s: float = 0.3,
        latency_sigma: float = 1.2,
        latency_max_s: float = 10.0,
        latency_seed: int = 0,
        **kwargs: Any,
    ):
        if latency_median_s < 0 or latency_sigma < 0 or latency_max_s < 0:
            raise ConfigError(
                f"latency_median_s={latency_median_s}, latency_sigma={latency_sigma} and "
                f"latency_max_s={latency_max_s} must all be >= 0 (latency_median_s=0 turns the sleep off)."
            )
        super().__init__(*args, **kwargs)
        self.latency = (latency_median_s, latency_sigma, latency_max_s)
        self.latency_seed = latency_seed

    def _invoke(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        task, call = self.task, json.dumps([tool.name, arguments], sort_keys=True, default=str)
        delay = tool_delay(self.latency_seed, task.id if task else "", len(self._actions), call, *self.latency)
        if delay:
            time.sleep(delay)
        return super()._invoke(tool, arguments)
