"""Language-model helpers shared by the model-based scorers: chat context of a turn, log-probs.

Used by :mod:`prm_gym.rewards.implicit` (PRIME's implicit PRM) and :mod:`prm_gym.rewards.progress` (information
gain, Monte-Carlo progress). Models are transformers causal LMs, given as any object with ``model``
and ``tokenizer`` (an :class:`prm_gym.agents.hf.HFPolicy` is one) or a model id (``"hf:tiny"``,
``"hf:<dir>"``) loaded on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.models import auto_device, load_hf
from prm_gym.rewards.types import Turn


@dataclass(frozen=True)
class ScoringModel:
    """A causal LM and its tokenizer, loaded by id for scoring (no sampling)."""

    model: Any
    tokenizer: Any


def scoring_model(policy: Any, seed: int = 0) -> Any:
    """The model ``policy`` names (a :class:`ScoringModel`, on the first GPU when there is one, like
    ``--device auto``), or ``policy`` itself when it is already an object with ``model`` and
    ``tokenizer`` (an HFPolicy, say: it stays where its owner put it)."""
    if isinstance(policy, str):
        model, tokenizer = load_hf(policy, seed)
        return ScoringModel(model.to(auto_device()), tokenizer)
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


def batched_target_logprobs(
    model: Any, rows: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int, batch_size: int = 0
) -> list[list[float]]:
    """:func:`target_logprobs` for many ``(prefix, target)`` rows in padded forward passes.

    Rows are right-padded with ``pad_id`` under an attention mask, so a row's log-probs do not
    depend on the others (causal attention never looks right). ``batch_size`` rows per pass
    (0: every row in one pass).

    Returns:
        Per row, the log-probability of each target id.
    """
    import torch

    if any(not p for p, _ in rows):
        raise ValueError("batched_target_logprobs needs non-empty prefixes.")
    step = batch_size if batch_size > 0 else max(1, len(rows))
    device = next(model.parameters()).device
    out: list[list[float]] = []
    for start in range(0, len(rows), step):
        chunk = [list(p) + list(t) for p, t in rows[start : start + step]]
        width = max(len(seq) for seq in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((len(chunk), width), dtype=torch.long, device=device)
        for i, seq in enumerate(chunk):
            ids[i, : len(seq)] = torch.tensor(seq, device=device)
            mask[i, : len(seq)] = 1
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
        for i, (prefix, target) in enumerate(rows[start : start + step]):
            pos = torch.arange(len(prefix) - 1, len(prefix) + len(target) - 1, device=device)
            picked = logp[i, pos, torch.tensor(list(target), device=device)]
            out.append([float(x) for x in picked.tolist()])
    return out
