"""The policy a ``--policy`` id names, for the commands that play with one (``prm-play``,
``prm-export``, ``train-agent --mode eval``):

* ``hf:tiny``, ``hf:smollm2-135m``, ``hf:<dir>`` (a transformers or peft folder, or a
  ``train-agent`` run directory): :class:`prm_gym.agents.hf.HFPolicy`;
* ``openai:<model>[@<base_url>]``: :class:`prm_gym.agents.openai_policy.OpenAIPolicy`, any
  OpenAI-compatible chat server (play and evaluate only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prm_gym.core.errors import ConfigError
from prm_gym.core.policy_spec import PolicySpec

if TYPE_CHECKING:  # the policies are imported when one is loaded, so a CLI's --help stays fast
    from prm_gym.core.policy import ChatPolicy, Policy

POLICY_HELP = (
    "hf:smollm2-135m, hf:tiny, hf:<model dir or train-agent run dir>, or openai:<model>@<base_url> "
    "(an OpenAI-compatible chat server; key from $OPENAI_API_KEY)"
)


def load_policy(policy_id: str, seed: int = 0, sample_dtype: str | None = None) -> Policy | ChatPolicy:
    """The policy ``policy_id`` names (see the module docstring); ``sample_dtype`` is for ``hf:``.

    Raises:
        ConfigError: the id is malformed or names nothing loadable.
    """
    spec = PolicySpec.parse(policy_id)
    if spec.kind not in ("hf", "openai"):
        raise ConfigError(
            f"policy id {policy_id!r}: this command plays hf:<model> or openai:<model>@<base_url> policies "
            "(a vLLM server is an OpenAI-compatible one: openai:<served model>@http://host:port/v1)."
        )
    policy: Policy | ChatPolicy = spec.load(seed, **({"sample_dtype": sample_dtype} if spec.kind == "hf" else {}))
    return policy
