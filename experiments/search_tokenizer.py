"""A small BPE tokenizer trained on the search study's own world, for the small random model.

The byte-level tokenizer of ``hf:tiny`` makes a multi-hop search episode about 1,440 ids long,
which puts the search comparisons out of reach on two CPU cores. This tokenizer is trained, once
and deterministically, on the generated world's passages, the env's prompt and instructions and
the hermes tool-call markup, so an episode is about a fifth as long. It keeps the byte-level
alphabet, so any text (a misspelt query, a hostile string) still encodes; only its merges are
fitted to the domain. Nothing is downloaded: it is built from files the project generates.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prm_gym.core.models import SPECIAL_TOKENS, chatml_tokenizer

VOCAB_SIZE = 4096


def _texts(world_people: int, world_seed: int) -> Iterator[str]:
    """What the tokenizer is fitted on: every passage, the env's instructions, the tool-call markup."""
    from experiments.search_demos import search_call
    from prm_gym.envs.search.tasks import generate_search_tasks, generate_world, world_passages

    world = generate_world(world_people, world_seed)
    for p in world_passages(world):
        yield f"Doc 1 [id={p.id}] Title: {p.title}\n{p.text}\n"
        yield search_call(p.title)
    for task in generate_search_tasks(world, 2000, 0, "train", "multi"):
        yield task.prompt
    yield from [_PROMPT] * 2000  # in every episode: weighted as often as the questions


_PROMPT = (
    "You are a careful assistant that solves tasks step by step and uses tools when they help.\n"
    'Tools: search(query). Call one as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.\n'
    "Use the search tool to find passages about the question; search again with new keywords for each hop. "
    "When you know the answer, reply with it alone inside <answer></answer>, e.g. <answer>Paris</answer>.\n"
    "<tool_response>\n</tool_response>\nsystem\nuser\nassistant\n"
)


def domain_tokenizer(world_people: int = 300, world_seed: int = 0, vocab_size: int = VOCAB_SIZE) -> Any:
    """A byte-level BPE with ``vocab_size`` ids fitted to the search world, ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_texts(world_people, world_seed), trainer=trainer)
    return chatml_tokenizer(core)
