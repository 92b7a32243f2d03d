"""Drive a peer suite's env (GEM or skyrl-gym) on given cases and report timings and rewards.

Runs inside the peer's own virtualenv (it imports nothing from prm-gym, only the stdlib-only
``result_line`` beside it)::

    .venv-peers/gem/bin/python benchmarks/peer_worker.py job.json

``job.json`` holds ``{"peer": "gem"|"skyrl", "kind": "math"|"search"|"sql"|"search_tool"|"sql_reward",
"db_root": "...", "search_url": "...", "fresh_sql": bool, "cases": [{"prompt", "gold", "action", "db_id"},
...]}`` (``sql_reward`` cases: ``{"gold", "action", "db_file"}``); each
``action`` is already in the peer's native format (``search_tool``: a ``<search>`` call, answered by
the retrieval server at ``search_url``; ``sql_reward``: skyrl-gym's SQL reward function alone,
``calculate_reward_single(action, gold, db_file, timeout_s)`` per case, no env; ``fresh_sql``: every
pass rewrites the ``<solution>`` query into a text no earlier pass used, ``fresh_text.fresh_sql``).
The worker builds the peer's envs and prints one JSON line,
``{"ready": true, "env": "<class>", "version": "<distribution version>"}`` or ``{"error": "..."}``
when the peer cannot run this kind; then, for each line ``pass`` read from stdin, it plays every
case as one episode (reset, then the final answer step) and prints
``{"step_us": <mean>, "episode_us": <mean>}``; ``construct`` times building one env (no episode) and
prints ``{"construct_us": <mean>}``; on ``end`` it prints ``{"rewards": [per case]}``
(of the last pass) and exits. ``benchmarks/peer_client.py`` drives it, so the peer's passes
interleave with ours and both sides see the same machine load.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from fresh_text import fresh_sql  # stdlib only, like result_line
from result_line import settle  # stdlib only: importable from the peer's own Python

Episode = tuple[Callable[[], object], Callable[[], float]]  # (reset, step -> reward)
#: (episodes, env class name, close, rewards by case index when the peer plays cases out of order)
Made = tuple[list[Episode], str, Callable[[], None], dict[int, float]]
#: Builds one env (what ``construct`` times).
MAKERS: dict[str, Callable[[], object]] = {}


def gem_episodes(kind: str, cases: list[dict[str, Any]], search_url: str = "") -> Made:
    """GEM's nearest envs: ``MathEnv`` (\\boxed{} answers, in-process grading) and ``QaEnv`` (<answer>)."""
    from datasets import Dataset

    if kind == "math":
        from gem.envs.math_env import MathEnv as GemEnv

        keys = {"question_key": "problem", "answer_key": "answer"}
        extra: dict[str, Any] = {"use_mp": False}  # in-process grading: GEM's faster mode, like ours
    elif kind in ("search", "search_tool"):
        from gem.envs.qa_env import QaEnv as GemEnv

        keys = {"question_key": "question", "answer_key": "answer"}
        extra = {}
    else:
        raise LookupError(f"GEM has no {kind} env (no text-to-SQL env in gem.envs)")
    rows = [
        {keys["question_key"]: f"{c['prompt']} [case {i}]", keys["answer_key"]: c["gold"]} for i, c in enumerate(cases)
    ]
    dataset = Dataset.from_list(rows)
    env = GemEnv(dataset=dataset, eval=True, **keys, **extra)
    MAKERS["env"] = lambda: GemEnv(dataset=dataset, eval=True, **keys, **extra)
    if kind == "search_tool":  # QaEnv with GEM's SearchTool, as GEM's search recipes wrap it
        from gem.tools.search_tool import SearchTool
        from gem.tools.tool_env_wrapper import ToolEnvWrapper

        env = ToolEnvWrapper(env, tools=[SearchTool(search_url=search_url, topk=3)])
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


def skyrl_episodes(kind: str, cases: list[dict[str, Any]], db_root: str, search_url: str = "") -> Made:
    """skyrl-gym's nearest envs: ``gsm8k`` (#### answers), ``search`` and ``text2sql``; one env per episode.
    ``sql_reward`` times its SQL reward function alone (``calculate_reward_single``), one call per case."""
    if kind == "sql_reward":
        from skyrl_gym.envs.sql.utils import calculate_reward_single

        def check(c: dict[str, Any]) -> float:  # reads c["action"] when called: refresh() rewrites it
            return float(calculate_reward_single(c["action"], c["gold"], c["db_file"], c.get("timeout_s", 30)))

        MAKERS["env"] = lambda: None
        return [(lambda: None, lambda c=c: check(c)) for c in cases], "calculate_reward_single", lambda: None, {}
    if kind == "math":
        from skyrl_gym.envs.gsm8k.env import GSM8kEnv

        def make(c: dict[str, Any]) -> Any:
            return GSM8kEnv(env_config=None, extras={"reward_spec": {"ground_truth": c["gold"]}})

    elif kind in ("search", "search_tool"):
        from skyrl_gym.envs.search.env import SearchEnv, SearchEnvConfig

        config = SearchEnvConfig(search_url=search_url) if search_url else SearchEnvConfig()

        def make(c: dict[str, Any]) -> Any:
            extras = {"reward_spec": {"ground_truth": {"target": [c["gold"]]}}, "max_turns": 2}
            return SearchEnv(config, extras=extras)

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
    MAKERS["env"] = lambda: make(cases[0])
    return episodes, {"math": "GSM8kEnv", "sql": "SQLEnv"}.get(kind, "SearchEnv"), lambda: None, {}


def one_pass(episodes: list[Episode]) -> tuple[float, float, list[float]]:
    """One pass over every case: mean us per step and per episode (reset + step), and the rewards."""
    step_total = episode_total = 0.0
    rewards: list[float] = []
    settle()
    for reset, step in episodes:
        t0 = time.perf_counter()
        reset()
        t1 = time.perf_counter()
        rewards.append(step())
        t2 = time.perf_counter()
        step_total += t2 - t1
        episode_total += t2 - t0
    return step_total / len(episodes) * 1e6, episode_total / len(episodes) * 1e6, rewards


def construct_pass(n: int = 200) -> float:
    """Mean microseconds to build one env (the first case's), no episode."""
    make = MAKERS["env"]
    make()
    settle()
    t0 = time.perf_counter()
    for _ in range(n):
        make()
    return (time.perf_counter() - t0) / n * 1e6


def refresh(cases: list[dict[str, Any]], rnd: int) -> None:
    """Give every case's ``<solution>`` query a text no earlier pass used (same rows)."""
    for i, c in enumerate(cases):
        c.setdefault("plain", c["action"])
        head, _, rest = c["plain"].partition("<solution>")
        sql, _, tail = rest.partition("</solution>")
        c["action"] = f"{head}<solution>{fresh_sql(sql, f'peer_r{rnd}_{i}')}</solution>{tail}"


def say(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def main() -> None:
    with open(sys.argv[1]) as fh:
        job = json.load(fh)
    try:
        url = job.get("search_url", "")
        if job["peer"] == "gem":
            episodes, name, close, by_case = gem_episodes(job["kind"], job["cases"], url)
        else:
            episodes, name, close, by_case = skyrl_episodes(job["kind"], job["cases"], job.get("db_root", ""), url)
        version = importlib.metadata.version("gem-llm" if job["peer"] == "gem" else "skyrl-gym")
    except Exception as exc:  # reported as a skipped row, with the reason
        say({"error": f"{type(exc).__name__}: {exc}"})
        return
    say({"ready": True, "env": name, "version": version})
    rewards: list[float] = []
    passes = 0
    for command in sys.stdin:  # "pass" runs one timed pass; "end" reports the last pass's rewards
        try:
            if command.strip() == "pass":
                if job.get("fresh_sql"):
                    refresh(job["cases"], passes)
                passes += 1
                step_us, episode_us, rewards = one_pass(episodes)
                say({"step_us": step_us, "episode_us": episode_us})
                continue
            if command.strip() == "construct":
                say({"construct_us": construct_pass()})
                continue
            close()
        except Exception as exc:
            say({"error": f"{type(exc).__name__}: {exc}"})
            return
        say({"rewards": [by_case[i] for i in range(len(job["cases"]))] if by_case else rewards})
        return


if __name__ == "__main__":
    main()
