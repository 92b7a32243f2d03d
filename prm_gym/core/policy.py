"""Policies: token ids in, sampled token ids and their log-probs out.

* :class:`Policy` is the protocol the rollout loop and the trainer use.
* :class:`FakePolicy` replays scripted responses (tests, demos of the env contract).
* :class:`prm_gym.agents.hf.HFPolicy` samples from a transformers model on the CPU or a GPU.
* :class:`ChatPolicy` is the protocol of policies that speak chat messages instead of token ids
  (:class:`prm_gym.agents.openai_policy.OpenAIPolicy`, any OpenAI-compatible server): they can
  play and be evaluated, but not trained, which needs the sampled ids and their log-probs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: Strings that end an assistant turn early: a complete tool call or a complete answer.
DEFAULT_STOP = ("</tool_call>", "</answer>")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one assistant turn.

    Attributes:
        max_new_tokens: the most tokens sampled for one turn.
        temperature: softmax temperature; 0 means greedy.
        stop: strings that end the turn once sampled (kept in the output).
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    stop: tuple[str, ...] = DEFAULT_STOP

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}.")


@dataclass(frozen=True)
class Generation:
    """One sampled turn.

    Attributes:
        token_ids: the sampled ids, exactly as sampled (no re-tokenisation).
        logprobs: the behaviour log-probability of each sampled id.
        text: the decoded text of ``token_ids``.
        finish_reason: ``"stop"`` (end-of-turn token or a stop string) or ``"length"``.
    """

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str = "stop"


@runtime_checkable
class Policy(Protocol):
    """Anything that samples assistant turns from prompt ids.

    Attributes:
        tokenizer: the Hugging Face tokenizer whose ids the policy speaks.
        version: incremented by the trainer after each weight update; recorded on every
            trajectory so asynchronous training knows how stale it is.
    """

    tokenizer: Any
    version: int

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]: ...


@dataclass(frozen=True)
class ChatReply:
    """One assistant turn from a chat policy.

    Attributes:
        text: the action for the env: the reply's content with its tool calls rendered in the
            env's tool-call format.
        message: the assistant message as the server returned it (kept in the conversation).
        finish_reason: the server's finish reason (``stop``, ``tool_calls``, ``length``).
    """

    text: str
    message: dict[str, Any]
    finish_reason: str = "stop"


@runtime_checkable
class ChatPolicy(Protocol):
    """Anything that answers chat conversations with assistant turns (no token ids).

    Attributes:
        tokenizer: a tokenizer with a chat template, from which callers build the
            :class:`prm_gym.agents.chat.ChatTemplate` that gives the system prompt and tool-call
            format; no token ids are sent.
        version: the weights' version (constant: nothing trains a chat policy).
    """

    tokenizer: Any
    version: int

    def chat(
        self,
        conversations: Sequence[list[dict[str, Any]]],
        tools: Sequence[Sequence[dict[str, Any]]],
        params: SamplingParams,
        tool_format: str,
    ) -> list[ChatReply]:
        """One reply per conversation (its tools sent as ``tools=``), its tool calls written in
        ``tool_format`` in :attr:`ChatReply.text`."""
        ...

    def followup(self, reply: ChatReply, observation: str) -> list[dict[str, Any]]:
        """The messages that carry the env's ``observation`` of ``reply`` back, after ``reply.message``."""
        ...


@dataclass
class FakePolicy:
    """Replays scripted responses, tokenised with a real tokenizer.

    Args:
        tokenizer: the tokenizer used to turn the scripted text into ids.
        script: a list of responses used in turn (cycled), or a function
            ``(prompt_text, call_index) -> response``.
    """

    tokenizer: Any
    script: Sequence[str] | Callable[[str, int], str]
    version: int = 0
    calls: int = field(default=0, init=False)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for prompt in prompts:
            if callable(self.script):
                text = self.script(self.tokenizer.decode(list(prompt)), self.calls)
            else:
                text = self.script[self.calls % len(self.script)]
            self.calls += 1
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))[: params.max_new_tokens]
            finish = "length" if len(ids) == params.max_new_tokens else "stop"
            if finish == "stop" and self.tokenizer.eos_token_id is not None:
                ids.append(self.tokenizer.eos_token_id)
            out.append(Generation(ids, [0.0] * len(ids), self.tokenizer.decode(ids, skip_special_tokens=True), finish))
        return out
