"""Demonstrations of multi-hop search, played through the real prm/Search-v0 env.

The demonstrator reads the task's gold hops (``meta["gold_ids"]``: the passages that prove the
answer, in hop order) and, for each, searches the title of that passage (the entity's name:
the person, then the bridge city, company or country), then answers the task's gold answer.
Every search runs through the env's retriever and every observation is the env's, so a
demonstration is an episode the env itself rewards; the SFT warm starts of
:mod:`experiments.compare` (``--task search``) are trained on them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.seams import trainer_env
from prm_gym.envs.search.tasks import generate_search_tasks, generate_world, world_passages
from prm_gym.training.sft import Demonstration, record, scripted

ENV_ID = "prm/Search-v0"
ENV_KWARGS: dict[str, Any] = {"question_kinds": "multi", "topk": 2, "max_turns": 4, "num_tasks": 2000}
"""The study's prm/Search-v0: multi-hop questions only, two passages a search, four turns
(three hops and the answer), 2000 training questions."""


def search_call(query: str) -> str:
    """One hermes tool call of the env's ``search`` tool."""
    return "<tool_call>" + json.dumps({"name": "search", "arguments": {"query": query}}) + "</tool_call>"


def demo_actions(meta: Mapping[str, Any], answer: str, titles: Mapping[str, str]) -> list[str]:
    """The assistant turns of one demonstration: one search per gold hop, then the answer."""
    return [*(search_call(titles[g]) for g in meta["gold_ids"]), f"<answer>{answer}</answer>"]


def search_demonstrations(
    chat: ChatTemplate, n: int, env_kwargs: Mapping[str, Any] | None = None
) -> tuple[list[Demonstration], float]:
    """``n`` ``(token_ids, loss_mask)`` demonstrations on the train split, and their mean reward.

    The loss mask covers the assistant's tokens (each turn and its end-of-turn token) only.
    """
    kw = {**ENV_KWARGS, **(env_kwargs or {})}
    env = gym.make(ENV_ID, **chat.env_kwargs(kw))
    tasks = trainer_env(env).tasks
    world = generate_world(int(kw.get("world_people", 300)), int(kw.get("world_seed", 0)))
    titles = {p.id: p.title for p in world_passages(world)}
    ids = list(tasks.ids)
    out, total = [], 0.0
    for k in range(n):
        task = tasks.get(ids[k % len(ids)])
        gold = task.answer if isinstance(task.answer, str) else task.answer[0]
        demo, reward = record(env, chat, task.id, k, scripted(demo_actions(task.meta, gold, titles)))
        out.append(demo)
        total += reward
    env.close()
    return out, total / max(n, 1)


def unseen_questions(n: int, path: Path, env_kwargs: Mapping[str, Any] | None = None) -> Path:
    """Write ``n`` held-out questions whose text no training question has (a JSONL task file for
    ``--eval.tasks``) and return its path.

    The generated world is finite (300 people, four multi-hop question shapes), so most test-split
    questions also occur, word for word, in the 2,000 training questions (86 of the first 100).
    These are drawn from the test split and kept only when their text is new; their answers are
    still reachable only through the bridge passage.
    """
    kw = {**ENV_KWARGS, **(env_kwargs or {})}
    world = generate_world(int(kw.get("world_people", 300)), int(kw.get("world_seed", 0)))
    train = generate_search_tasks(world, int(kw["num_tasks"]), 0, "train", "multi")
    seen = {t.prompt for t in train}
    out, texts = [], set()
    for task in generate_search_tasks(world, 20 * n, 0, "test", "multi"):
        if task.prompt in seen or task.prompt in texts:
            continue
        texts.add(task.prompt)
        out.append({"id": task.id, "question": task.prompt, "answer": list(task.answer), **task.meta})
        if len(out) == n:
            break
    if len(out) < n:
        raise ValueError(f"only {len(out)} unseen multi-hop questions exist in this world; ask for fewer")
    text = "".join(json.dumps(r) + "\n" for r in out)
    if not path.exists() or path.read_text() != text:  # seeds run as parallel processes read it
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        part.write_text(text)
        os.replace(part, path)  # atomic: a reader sees the old file or the whole new one
    return path
