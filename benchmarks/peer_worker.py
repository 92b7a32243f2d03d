"""Drive a peer suite's env (GEM or skyrl-gym) on given cases and report timings and rewards.

Runs inside the peer's own virtualenv (it imports nothing from prm-gym)::

    /tmp/gem-venv/bin/python benchmarks/peer_worker.py job.json

``job.json`` holds ``{"peer": "gem"|"skyrl", "kind": "math"|"search"|"sql", "reps": N,
"db_root": "...", "cases": [{"prompt", "gold", "action", "db_id"}, ...]}``; each ``action`` is
already in the peer's native format. The worker plays every case as one episode (reset, then the
final answer step), once as warm-up and ``reps`` times measured, and prints one JSON line:
``{"step_us": [per rep], "episode_us": [per rep], "rewards": [per case], "env": "<class>"}``,
or ``{"error": "..."}`` when the peer cannot run this kind.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from collections.abc import Callable
from typing import Any

Episode = tuple[Callable[[], object], Callable[[], float]]  # (reset, step -> reward)
#: (episodes, env class name, close, rewards by case index when the peer plays cases out of order)
Made = tuple[list[Episode], str, Callable[[], None], dict[int, float]]


def gem_episodes(kind: str, cases: list[dict[str, Any]]) -> Made:
    """GEM's nearest envs: ``MathEnv`` (\\boxed{} answers, in-process grading) and ``QaEnv`` (<answer>)."""
    from datasets import Dataset

    if kind == "math":
        from gem.envs.math_env import MathEnv as GemEnv

        keys = {"question_key": "problem", "answer_key": "answer"}
        extra: dict[str, Any] = {"use_mp": False}  # in-process grading: GEM's faster mode, like ours
    elif kind == "search":
        from gem.envs.qa_env import QaEnv as GemEnv

        keys = {"question_key": "question", "answer_key": "answer"}
        extra = {}
    else:
        raise LookupError(f"GEM has no {kind} env (no text-to-SQL env in gem.envs)")
    rows = [
        {keys["question_key"]: f"{c['prompt']} [case {i}]", keys["answer_key"]: c["gold"]} for i, c in enumerate(cases)
    ]
    env = GemEnv(dataset=Dataset.from_list(rows), eval=True, **keys, **extra)
    current = {"case": -1}
    by_case: dict[int, float] = {}

    def reset() -> None:  # GEM serves its dataset in its own order and wraps the question
        obs, _ = env.reset()
        found = re.search(r"\[case (\d+)\]", obs)
        current["case"] = int(found.group(1)) if found else -1

    def step() -> float:
        reward = float(env.step(cases[current["case"]]["action"])[1])
        by_case[current["case"]] = reward
        return reward

    def close() -> None:
        with contextlib.suppress(AttributeError):  # gem-llm 0.1.0: MathEnv.close() needs the use_mp pool
            env.close()

    return [(reset, step) for _ in cases], type(env).__name__, close, by_case


def skyrl_episodes(kind: str, cases: list[dict[str, Any]], db_root: str) -> Made:
    """skyrl-gym's nearest envs: ``gsm8k`` (#### answers), ``search`` and ``text2sql``; one env per episode."""
    if kind == "math":
        from skyrl_gym.envs.gsm8k.env import GSM8kEnv

        def make(c: dict[str, Any]) -> Any:
            return GSM8kEnv(env_config=None, extras={"reward_spec": {"ground_truth": c["gold"]}})

    elif kind == "search":
        from skyrl_gym.envs.search.env import SearchEnv, SearchEnvConfig

        def make(c: dict[str, Any]) -> Any:
            extras = {"reward_spec": {"ground_truth": {"target": [c["gold"]]}}, "max_turns": 2}
            return SearchEnv(SearchEnvConfig(), extras=extras)

    else:
        from skyrl_gym.envs.sql.env import SQLEnv, Text2SQLEnvConfig

        def make(c: dict[str, Any]) -> Any:
            extras = {"db_id": c["db_id"], "reward_spec": {"ground_truth": c["gold"]}, "data": "spider"}
            return SQLEnv(Text2SQLEnvConfig(db_path=db_root), extras=extras)

    episodes: list[Episode] = []
    for c in cases:
        box: dict[str, Any] = {}

        def reset(c: dict[str, Any] = c, box: dict[str, Any] = box) -> None:
            box["env"] = make(c)
            box["env"].init([{"role": "user", "content": c["prompt"]}])

        def step(c: dict[str, Any] = c, box: dict[str, Any] = box) -> float:
            return float(box["env"].step(c["action"])["reward"])

        episodes.append((reset, step))
    return episodes, {"math": "GSM8kEnv", "search": "SearchEnv", "sql": "SQLEnv"}[kind], lambda: None, {}


def play(episodes: list[Episode], reps: int) -> tuple[list[float], list[float], list[float]]:
    """Warm-up pass, then ``reps`` passes: mean us per step and per episode, and the rewards."""
    step_us: list[float] = []
    episode_us: list[float] = []
    rewards: list[float] = []
    for rep in range(reps + 1):
        step_total = episode_total = 0.0
        rewards = []
        for reset, step in episodes:
            t0 = time.perf_counter()
            reset()
            t1 = time.perf_counter()
            rewards.append(step())
            t2 = time.perf_counter()
            step_total += t2 - t1
            episode_total += t2 - t0
        if rep:  # rep 0 is the warm-up
            step_us.append(step_total / len(episodes) * 1e6)
            episode_us.append(episode_total / len(episodes) * 1e6)
    return step_us, episode_us, rewards


def main() -> None:
    with open(sys.argv[1]) as fh:
        job = json.load(fh)
    try:
        if job["peer"] == "gem":
            episodes, name, close, by_case = gem_episodes(job["kind"], job["cases"])
        else:
            episodes, name, close, by_case = skyrl_episodes(job["kind"], job["cases"], job.get("db_root", ""))
        step_us, episode_us, rewards = play(episodes, int(job["reps"]))
        close()
        if by_case:
            rewards = [by_case[i] for i in range(len(job["cases"]))]
    except Exception as exc:  # reported as a skipped row, with the reason
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return
    print(json.dumps({"step_us": step_us, "episode_us": episode_us, "rewards": rewards, "env": name}))


if __name__ == "__main__":
    main()
