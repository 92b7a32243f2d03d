"""Supervised warm starts: scripted episodes recorded through a real env, and cross-entropy on them.

A demonstration is ``(token_ids, loss_mask)``: the chat template's rendering of one episode the
env itself played, the mask covering the assistant's tokens (each turn and its end-of-turn token)
and nothing the env wrote. :func:`record` plays one; :func:`sft` trains on many.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.memory import release
from prm_gym.core.progress import bar
from prm_gym.training.update import micro_logprobs, recomputing

Demonstration = tuple[list[int], list[int]]
"""``(token_ids, loss_mask)`` of one recorded episode."""

_TOOL_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.S)


def tool_result(observation: str) -> str:
    """The text of the first tool response in an observation ("" when there is none)."""
    found = _TOOL_RESPONSE.search(observation)
    return found.group(1) if found else ""


def record(
    env: Any, chat: ChatTemplate, task_id: str, seed: int, next_action: Callable[[str], str | None]
) -> tuple[Demonstration, float]:
    """Play one scripted episode of ``task_id`` through ``env``; return it and its total reward.

    ``next_action(observation)`` gets the env's latest observation (the task prompt, then each
    turn's tool responses) and returns the assistant's next turn, or None to stop. Each turn is
    stepped as the text the tokens decode to, so the env scores exactly what was recorded.
    """
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    tokens = chat.prompt_ids(obs, info["tools"])
    mask = [0] * len(tokens)
    total = 0.0
    while (text := next_action(obs)) is not None:
        sampled = [*chat.encode(text), chat.eos_token_id]
        tokens += sampled
        mask += [1] * len(sampled)
        obs, reward, term, trunc, _ = env.step(chat.tokenizer.decode(sampled, skip_special_tokens=True))
        total += float(reward)
        if term or trunc:
            break
        nxt = chat.observation_ids(obs, sampled)
        tokens += nxt
        mask += [0] * len(nxt)
    return (tokens, mask), total


def scripted(actions: list[str]) -> Callable[[str], str | None]:
    """A ``next_action`` that plays ``actions`` in order, ``{result}`` standing for the last tool result."""
    queue = iter(actions)

    def step(obs: str) -> str | None:
        action = next(queue, None)
        return None if action is None else action.replace("{result}", tool_result(obs))

    return step


def sft(
    model: Any,
    demos: list[Demonstration],
    steps: int,
    lr: float,
    batch: int,
    seed: int,
    bf16: bool,
    every: int = 0,
    checkpoint: Callable[[int], None] | None = None,
    recompute: bool = False,
) -> float:
    """Cross-entropy on the demonstrations' assistant tokens (under bfloat16 autocast with ``bf16``);
    returns the last loss. With ``every``, ``checkpoint(step)`` is called after every ``every`` steps
    (the model in eval mode), e.g. to score it on validation tasks and keep the best. With
    ``recompute`` the decoder layers recompute their activations in the backward pass (the same
    update, about a third more compute, activation memory of one layer: :func:`recomputing`)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)  # the demonstrations' draw, on the host
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    opt.zero_grad(set_to_none=True)  # whatever the model held before
    model.train()
    loss = torch.tensor(0.0, device=device)
    progress = bar(steps, "SFT", "step", delay=0.0)
    with recomputing(model, recompute):
        for step in range(steps):
            rows = [demos[i] for i in torch.randint(len(demos), (batch,), generator=gen, device="cpu").tolist()]
            width = max(len(t) for t, _ in rows)
            ids = torch.tensor([list(t) + [0] * (width - len(t)) for t, _ in rows], dtype=torch.long, device=device)
            mask = torch.tensor([list(m) + [0] * (width - len(m)) for _, m in rows], dtype=torch.float32, device=device)
            attn = torch.tensor(
                [[1] * len(t) + [0] * (width - len(t)) for t, _ in rows], dtype=torch.long, device=device
            )
            lp = micro_logprobs(model, ids, attn, 0.0, bf16, mask)
            loss = -(lp * mask).sum() / mask.sum()
            loss.backward()  # onto no gradients: dropped before the loop and after every step
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)  # the gradients leave memory before a validation samples
            release(collect=False)  # and the step's freed activations leave the process
            progress.update(1)
            progress.set_postfix(loss=f"{float(loss.detach()):.3f}", refresh=False)
            if checkpoint is not None and every and (step + 1) % every == 0:
                model.eval()
                checkpoint(step + 1)
                model.train()
    progress.close()
    model.eval()
    return float(loss.detach())
