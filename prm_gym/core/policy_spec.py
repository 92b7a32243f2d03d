"""What a ``--policy`` id names, parsed once: a kind and its target.

==================  ===================================================  =========
id                  the policy                                           trainable
==================  ===================================================  =========
``hf:<model>``      transformers, in this process (``hf:tiny``,          yes
                    ``hf:smollm2-135m``, ``hf:<dir>`` or a run dir)
``vllm:<urls>``     vLLM servers (comma-separated), reloading the        yes
                    weights the learner saves to ``--vllm-weights``
``vllm-engine:<d>`` an in-process vLLM engine on model folder ``<d>``    yes
``openai:<m>[@u]``  an OpenAI-compatible chat server                     no (eval)
==================  ===================================================  =========

Each kind names the class that builds its sampler (``module:Class`` with a ``from_id``
constructor, imported on first use, so ``core`` imports no floor above it and a CLI's
``--help`` stays fast). Nothing else in the project looks at an id's prefix: it asks the spec.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from prm_gym.core.errors import ConfigError


@dataclass(frozen=True)
class PolicyKind:
    """One kind of policy id: where its sampler class lives and what the trainer may do with it."""

    name: str
    sampler: str
    """``module:Class`` of the sampler; the class has ``from_id(policy_id, seed=..., ...)``."""
    trainable: bool
    """The sampler returns token ids and their log-probs, so the learner can train on them."""


KINDS: dict[str, PolicyKind] = {
    "hf": PolicyKind("hf", "prm_gym.agents.hf:HFPolicy", trainable=True),
    "vllm": PolicyKind("vllm", "prm_gym.agents.vllm:VLLMPolicy", trainable=True),
    "vllm-engine": PolicyKind("vllm-engine", "prm_gym.agents.vllm_engine:VLLMEnginePolicy", trainable=True),
    "openai": PolicyKind("openai", "prm_gym.agents.openai_policy:OpenAIPolicy", trainable=False),
}

POLICY_HELP = (
    "hf:smollm2-135m, hf:tiny, hf:<model dir or train-agent run dir>, vllm:<url>[,<url>...], "
    "vllm-engine:<model dir>, or openai:<model>@<base_url> (an OpenAI-compatible chat server, "
    "evaluation only; key from $OPENAI_API_KEY)"
)


@dataclass(frozen=True)
class PolicySpec:
    """A parsed policy id: ``kind`` (a key of :data:`KINDS`) and ``target`` (what follows the colon)."""

    kind: str
    target: str

    @classmethod
    def parse(cls, policy_id: str) -> PolicySpec:
        """Raises:
        ConfigError: the id has no known kind or nothing after the colon."""
        kind, sep, target = str(policy_id).partition(":")
        if not sep or kind not in KINDS or not target.strip():
            raise ConfigError(f"policy id {policy_id!r} is not one of: {POLICY_HELP}.")
        return cls(kind, target)

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}"

    @property
    def trainable(self) -> bool:
        return KINDS[self.kind].trainable

    @property
    def urls(self) -> list[str]:
        """The servers of a ``vllm:`` id."""
        return [u for u in self.target.split(",") if u]

    def load(self, seed: int = 0, **kwargs: Any) -> Any:
        """The sampler this id names, built by its kind's class (``from_id``)."""
        module, name = KINDS[self.kind].sampler.split(":")
        cls = getattr(importlib.import_module(module), name)
        return cls.from_id(str(self), seed=seed, **kwargs)
