"""Whether held-out evaluation would replay training tasks (a task list given with ``--tasks``
and no ``--eval.tasks`` is read for both): :func:`warn_if_heldout_reuses` warns, naming the fix.

Generated envs and dataset folders with a test split give held-out tasks of their own
(``--eval.env-kwargs '{"split": "test"}'``, the default); a single task file has no split, so its
tasks would be evaluated as "held-out" although the policy trained on them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from prm_gym.core.seams import trainer_env
from prm_gym.core.tasks import TaskSet


class HeldOutOverlapWarning(UserWarning):
    """Held-out evaluation plays tasks the run also trains on."""


def _fingerprints(tasks: TaskSet, ids: list[str]) -> set[tuple[str, str]]:
    return {(tid, str(tasks.get(tid).prompt)) for tid in ids}


def heldout_overlap(train_env: gym.Env, eval_env: gym.Env, num_tasks: int) -> tuple[int, int]:
    """How many of the first ``num_tasks`` held-out tasks (same id and prompt) are training tasks, of how many."""
    train_tasks = trainer_env(train_env).tasks
    eval_tasks = trainer_env(eval_env, where="eval env").tasks
    ids = list(eval_tasks.ids)[:num_tasks]
    return len(_fingerprints(eval_tasks, ids) & _fingerprints(train_tasks, list(train_tasks.ids))), len(ids)


def warn_if_heldout_reuses(env_id: str, train_env: gym.Env, make_eval: Callable[[], Any], num_tasks: int) -> int:
    """Warn (:class:`HeldOutOverlapWarning`) when ``env_id``'s held-out tasks are training tasks;
    returns how many are."""
    eval_env = make_eval()
    try:
        shared, n = heldout_overlap(train_env, eval_env, num_tasks)
    finally:
        eval_env.close()
    if shared:
        warnings.warn(
            f"{env_id}: {shared} of the {n} held-out eval tasks are also training tasks (one task list serves "
            "both), so eval/* measures recall, not generalisation; give --eval.tasks a file of other tasks "
            "(docs/training.md, 'Evaluation').",
            HeldOutOverlapWarning,
            stacklevel=2,
        )
    return shared
