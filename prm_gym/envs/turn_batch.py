"""One turn's tool calls answered in one batch across the envs that share a backend.

The rollout samples a turn for every live episode at once, then steps the envs one after another.
When several envs send their tool calls to one shared backend (prm/Search-v0's retrieval server or
index), :func:`batched_turn` first hands that env family every action of the turn, so it can answer
all their calls with one batched request; each env's ``step`` then takes its answer from what the
batch fetched instead of making its own call. An env opts in with three methods on its unwrapped
class (:class:`TurnBatching`):

* ``turn_batch_key()``: envs of one class with equal keys share a backend (None: not batchable now);
* ``prefetch_turn(envs, actions)`` (a classmethod): fetch the calls of ``actions`` for ``envs`` (all
  with one key) in one batch and hand each env the answers;
* ``end_turn()``: forget them (the answers live for one turn only).

A prefetch must leave every observation, reward and info value as it was without it: each env's
``step`` still parses and validates its own action, the batch answers only calls it could parse and
check (the rest take the ordinary per-call path), an answer is reused only for an identical call
(same backend, query text and settings) and a failed batch leaves every call to the per-call path,
with its own typed errors and deadline. So nothing one agent writes changes another episode's result.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym


@runtime_checkable
class TurnBatching(Protocol):
    """An env whose tool calls of one turn can be fetched for a group of envs in one batch."""

    def turn_batch_key(self) -> Hashable | None:
        """Envs of one class with equal keys share a backend; None: do not batch this env now."""
        ...

    @classmethod
    def prefetch_turn(cls, envs: Sequence[Any], actions: Sequence[Any]) -> None:
        """Fetch the tool calls of ``actions[i]`` for ``envs[i]`` (one key) in one batch; never raises
        for a backend failure (each env's step then calls the backend itself)."""
        ...

    def end_turn(self) -> None:
        """Forget what :meth:`prefetch_turn` fetched."""
        ...


def turn_groups(envs: Sequence[gym.Env[Any, Any]]) -> list[list[int]]:
    """Indices of ``envs`` that can share one batch: two or more envs of one class and key."""
    groups: dict[tuple[type, Hashable], list[int]] = {}
    for i, env in enumerate(envs):
        inner = env.unwrapped
        key_of = getattr(inner, "turn_batch_key", None)  # not isinstance(TurnBatching): 200x slower
        key = key_of() if key_of is not None else None
        if key is not None:
            groups.setdefault((type(inner), key), []).append(i)
    return [idx for idx in groups.values() if len(idx) > 1]


@contextmanager
def batched_turn(envs: Sequence[gym.Env[Any, Any]], actions: Sequence[Any], enabled: bool = True) -> Iterator[None]:
    """Inside the block, ``envs[i].step(actions[i])`` takes its tool results from one batch per group
    of envs sharing a backend (:func:`turn_groups`); the fetched answers are forgotten on leaving it.

    Args:
        envs: the envs to be stepped this turn (wrapped or not).
        actions: their actions, in the same order.
        enabled: False: do nothing (every call takes the per-call path).
    """
    groups = turn_groups(envs) if enabled and len(envs) > 1 else []
    try:
        for idx in groups:
            members: list[TurnBatching] = [envs[i].unwrapped for i in idx]  # type: ignore[misc]
            type(members[0]).prefetch_turn(members, [actions[i] for i in idx])
        yield
    finally:
        for idx in groups:
            for i in idx:
                envs[i].unwrapped.end_turn()  # type: ignore[attr-defined]
