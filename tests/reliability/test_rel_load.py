"""Load: many concurrent episodes per env for a bounded time; memory and file descriptors are
measured at the start and the end (no leak) and every worker finishes (no deadlock).
"""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)

ACTIONS = {
    "prm/Math-v0": [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>',
        "<answer>42</answer>",
    ],
    "prm/SQL-v0": [
        '<tool_call>{"name": "list_tables", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "run_query", "arguments": {"sql": "SELECT 1"}}</tool_call>',
        "<answer>SELECT 1</answer>",
    ],
    "prm/Search-v0": [
        '<tool_call>{"name": "search", "arguments": {"query": "born city"}}</tool_call>',
        "<answer>x</answer>",
    ],
    "prm/Code-v0": [
        '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>',
        "<answer>def f(): pass</answer>",
    ],
}
KWARGS: dict[str, dict[str, Any]] = {
    "prm/Math-v0": {"num_tasks": 20},
    "prm/SQL-v0": {"num_tasks": 20},
    "prm/Search-v0": {"num_tasks": 20, "world_people": 40},
    "prm/Code-v0": {"num_tasks": 5, "judge": "rule/format + rule/tool"},
}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def children() -> int:
    me = str(os.getpid())
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == me:
                count += 1
        except (OSError, IndexError):
            continue
    return count


def run_load(env_id: str, workers: int, seconds: float) -> dict[str, float]:
    """``workers`` threads, each making envs and playing episodes for ``seconds``; the figures."""
    episodes, errors = [0] * workers, []
    deadline = time.monotonic() + seconds

    def work(w: int) -> None:
        try:
            while time.monotonic() < deadline:
                env = gym.make(env_id, **KWARGS[env_id])
                try:
                    for ep in range(3):
                        env.reset(seed=w * 1000 + ep)
                        for action in ACTIONS[env_id]:
                            *_, terminated, truncated, info = env.step(action)
                            assert info["reward_status"] == "ok", info
                            if terminated or truncated:
                                break
                        episodes[w] += 1
                finally:
                    env.close()
        except BaseException as exc:  # reported by the main thread
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    assert not any(t.is_alive() for t in threads), "deadlock: a worker never finished"
    assert errors == []
    return {"episodes": float(sum(episodes))}


@pytest.mark.parametrize("env_id", list(ACTIONS))
def test_concurrent_episodes_do_not_leak(env_id: str) -> None:
    workers = 4 if env_id == "prm/Code-v0" else 8
    run_load(env_id, workers, 0.5)  # warm-up: caches, lazily imported modules, thread pools
    gc.collect()
    fd0, rss0, kids0 = open_fds(), rss_mb(), children()
    figures = run_load(env_id, workers, 2.5)
    gc.collect()
    time.sleep(0.3)
    fd1, rss1, kids1 = open_fds(), rss_mb(), children()
    print(f"\n{env_id}: {workers} workers, {figures['episodes']:.0f} episodes", end=", ")
    print(f"fds {fd0}->{fd1}, rss {rss0:.0f}->{rss1:.0f} MiB, children {kids0}->{kids1}")
    assert figures["episodes"] >= workers
    assert fd1 <= fd0 + 2, (fd0, fd1)
    assert kids1 <= kids0
    assert rss1 - rss0 < 64, (rss0, rss1)
