"""Language-model helpers shared by the model-based scorers: chat context of a turn, log-probs.

Used by :mod:`prm_gym.rewards.implicit` (PRIME's implicit PRM) and :mod:`prm_gym.rewards.progress` (information
gain, Monte-Carlo progress). Models are transformers causal LMs; policies are given as an
:class:`prm_gym.core.hf.HFPolicy` or a policy id (``"hf:tiny"``, ``"hf:<dir>"``) loaded on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.hf import HFPolicy
from prm_gym.rewards.types import Turn


def load_policy(policy: Any, seed: int = 0) -> Any:
    """An HFPolicy from an id, or ``policy`` itself when it is already a policy object."""
    if isinstance(policy, str):
        return HFPolicy.from_id(policy, seed=seed)
    if policy is None:
        raise ConfigError("a policy is required: give policy='hf:tiny', 'hf:<dir>' or an HFPolicy.")
    return policy


def messages_before(turn: Turn) -> list[dict[str, str]]:
    """The chat up to (not including) ``turn``'s assistant message."""
    messages = [{"role": "user", "content": turn.task.prompt}]
    for action, obs in turn.history:
        messages += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
    return messages


def messages_after(turn: Turn) -> list[dict[str, str]]:
    """The chat including ``turn``'s assistant message and its tool results (if any)."""
    messages = [*messages_before(turn), {"role": "assistant", "content": turn.action}]
    if turn.tool_results:
        outputs = "\n".join(f"<tool_response>\n{r.output}\n</tool_response>" for r in turn.tool_results)
        messages.append({"role": "user", "content": outputs})
    return messages


def prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of ``messages`` followed by the assistant generation prompt."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer.encode(str(text), add_special_tokens=False))


def target_logprobs(model: Any, prefix: Sequence[int], target: Sequence[int]) -> list[float]:
    """Log-probabilities of each id of ``target`` given ``prefix`` and the earlier target ids."""
    import torch

    if not target:
        return []
    if not prefix:
        raise ValueError("target_logprobs needs a non-empty prefix.")
    device = next(model.parameters()).device
    ids = torch.tensor([list(prefix) + list(target)], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prefix) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, torch.tensor(list(target), device=device)[:, None]).squeeze(-1)
    return [float(x) for x in picked.tolist()]
