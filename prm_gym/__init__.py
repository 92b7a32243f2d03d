"""prm-gym: multi-turn tool-using Gymnasium environments with turn-level process rewards.

Importing ``prm_gym`` registers every ``prm/`` id with Gymnasium (string entry points, so no env
module loads until ``gym.make``); ``gym.make("prm_gym:prm/Math-v0")`` does the import for you.

The packages, lowest floor first (each imports only the floors below it):

* ``prm_gym.core``: errors, the tool-call parser, task records, tool schemas, spaces, the policy
  protocol and model loading by id;
* ``prm_gym.sandbox``: code execution (bubblewrap, a warm pool, Docker);
* ``prm_gym.rewards``: judges, PRMs and guards;
* ``prm_gym.envs``: one Gymnasium env per tool family (the SQL database layer in ``envs.sql``), ``ToolEnv``
  and ``register_tool_env``;
* ``prm_gym.agents``: policies, chat templates, rollouts;
* ``prm_gym.training``: the trainer and ``train-agent``.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

__version__ = "0.2.0"

ENVS: dict[str, tuple[str, int]] = {
    "prm/Math-v0": ("prm_gym.envs.math.env:MathEnv", 6),
    "prm/Code-v0": ("prm_gym.envs.code.env:CodeEnv", 8),
    "prm/SQL-v0": ("prm_gym.envs.sql.env:SQLEnv", 8),
    "prm/Search-v0": ("prm_gym.envs.search.env:SearchEnv", 4),
}
"""Every built-in id: (entry point, turn budget = the registered ``max_turns``).

The env truncates at its own ``max_turns``; no ``max_episode_steps`` is registered, because Gymnasium's
``TimeLimit`` wrapper would then cap the budget at the registered value and ``gym.make(id, max_turns=10)``
would silently end after 6 turns."""

BENCHMARK_ENVS: dict[str, tuple[str, int]] = {
    "prm/MathSlowTools-v0": ("prm_gym.envs.math.slow_tools:SlowToolsMathEnv", 6),
}
"""Workloads for benchmarks (not in ``ENVS``): prm/Math-v0 with heavy-tailed tool latency."""

for _id, (_entry, _turns) in {**ENVS, **BENCHMARK_ENVS}.items():
    if _id not in registry:
        register(id=_id, entry_point=_entry, kwargs={"max_turns": _turns})
