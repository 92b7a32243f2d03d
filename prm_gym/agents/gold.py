"""``--policy gold``: a scripted policy that plays each task's gold actions, to check a task file.

It asks the env for the actions that solve the current task (``env.unwrapped.gold_actions(task)``:
for every :class:`~prm_gym.envs.base.ToolEnv`, Math, SQL, Code, Search and custom envs included,
one turn submitting the task's gold answer ``<answer>{answer}</answer>``, the first of a list of
answers) and replays them turn by turn. A task whose gold episode does not reach the success
threshold is a task the env cannot reward: a wrong gold answer, an answer the judge cannot parse,
a gold SQL query that fails on its database, a reference solution that fails its tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.policy import Generation, SamplingParams

#: The ``--policy`` value that selects :class:`GoldPolicy`.
GOLD = "gold"


def _tiny_tokenizer() -> Any:
    from prm_gym.core.models import tiny_tokenizer

    return tiny_tokenizer()


@dataclass
class GoldPolicy:
    """Replays ``env.unwrapped.gold_actions(task)`` in the bound env (one env, one episode at a time).

    Args:
        env: the env being played (bind it after ``gym.make``: ``policy.env = env``).
        tokenizer: tokenises the scripted text (default: the byte-level tokenizer of ``hf:tiny``).
    """

    env: Any = None
    tokenizer: Any = field(default_factory=_tiny_tokenizer)
    version: int = 0

    def next_action(self) -> str:
        """The gold action of the bound env's current turn (its last one again past the script's end)."""
        if self.env is None:
            raise ConfigError("policy gold: no env bound; set policy.env = env before playing.")
        base = self.env.unwrapped
        gold = getattr(base, "gold_actions", None)
        if gold is None or base.task is None:
            raise ConfigError(f"policy gold: {type(base).__name__} has no gold_actions(task); use a ToolEnv.")
        actions = list(gold(base.task))
        return actions[min(len(base.actions), len(actions) - 1)]

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if len(prompts) > 1:
            raise ConfigError("policy gold plays one env at a time; roll out one episode per call.")
        out = []
        for _ in prompts:
            ids = list(self.tokenizer.encode(self.next_action(), add_special_tokens=False))
            if self.tokenizer.eos_token_id is not None:
                ids.append(self.tokenizer.eos_token_id)
            out.append(Generation(ids, [0.0] * len(ids), self.tokenizer.decode(ids, skip_special_tokens=True), "stop"))
        return out


def gold_passed(outcome: float, terminated: bool, infra_error: bool, threshold: float = 1.0) -> bool:
    """Whether a gold episode shows the task is sound: it ended on an answer, no infrastructure
    failed, and its outcome return (the ``reward_outcome`` terms) reaches ``threshold``."""
    return terminated and not infra_error and outcome >= threshold
