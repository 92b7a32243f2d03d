"""Chat rendering: the system prompt with tool schemas, and token ids for every turn.

The env speaks text; the policy speaks token ids. :class:`ChatTemplate` turns the env's first
observation into prompt ids (system prompt with the tools, then the task as a user message)
and each later observation into the ids appended after the assistant's sampled tokens. The
sampled tokens themselves are never re-tokenised: the rollout appends exactly what the policy
sampled, so training sees the ids the policy produced.

Text that came from the env or a tool (the task, observations, tool output) is tokenised with
special-token parsing off: a program that prints ``<|im_start|>`` puts the characters
``<|im_start|>`` in front of the policy, never the special token, so nothing an agent's code
prints can forge a turn of its own context. Only the template's own scaffolding is parsed for
special tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prm_gym.core.errors import ConfigError

DEFAULT_SYSTEM = "You are a careful assistant that solves tasks step by step and uses tools when they help."

_TOOLS_BLOCK = """

# Tools

You may call one or more of these tools. Their JSON schemas are inside <tools></tools>:
<tools>
{schemas}
</tools>

To call a tool, reply with a JSON object naming it and giving its arguments, inside <tool_call></tool_call>:
<tool_call>
{{"name": "<tool name>", "arguments": {{"<argument>": <value>}}}}
</tool_call>
Tool results come back inside <tool_response></tool_response>."""

_MARK = "\x00MARK\x00"
#: Inserted after the first character of a special token's text found in env text, where a
#: template does not render message contents verbatim (so they cannot be tokenised apart).
_BREAK = "\u2060"

_COMPACT_BLOCK = """
Tools: {signatures}. Call one as <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>."""


def _signature(tool: dict[str, Any]) -> str:
    fn = tool.get("function", tool)
    props = fn.get("parameters", {}).get("properties", {})
    return f"{fn.get('name', '?')}({', '.join(props)})"


class ChatTemplate:
    """Renders prompts and observations with a tokenizer's chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        system_prompt: the system message before the tool block.
        observation_role: the role observations are sent as (``"user"`` works with every
            template; the env already wraps tool results in ``<tool_response>``).
        tools_block: ``"full"`` lists the tools' JSON schemas; ``"compact"`` only their
            signatures and the call syntax (a few dozen tokens: for tiny byte-level models).
    """

    def __init__(
        self,
        tokenizer: Any,
        system_prompt: str = DEFAULT_SYSTEM,
        observation_role: str = "user",
        tools_block: str = "full",
    ):
        if tools_block not in ("full", "compact"):
            raise ConfigError(f"tools_block must be 'full' or 'compact', got {tools_block!r}.")
        self.tools_block = tools_block
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the tokenizer has no chat_template; set tokenizer.chat_template first.")
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.observation_role = observation_role
        self.eos_token_id: int = tokenizer.eos_token_id
        self._close, self._turn_prefix = self._template_pieces()

    def _render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return str(
            self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        )

    def _template_pieces(self) -> tuple[str, str]:
        """What closes an assistant turn, and what follows it up to the next generation prompt."""
        marker = _MARK
        base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        with_asst = self._render([*base, {"role": "assistant", "content": marker}], False)
        with_obs = self._render(
            [*base, {"role": "assistant", "content": marker}, {"role": self.observation_role, "content": marker}],
            True,
        )
        close = with_asst.split(marker, 1)[1]
        after = with_obs.split(marker, 1)[1]
        if not after.startswith(close):
            raise ConfigError("chat template renders an assistant turn inconsistently; cannot append turns.")
        return close, after[len(close) :]

    def system_message(self, tools: Sequence[dict[str, Any]]) -> str:
        if not tools:
            return self.system_prompt
        if self.tools_block == "compact":
            return self.system_prompt + _COMPACT_BLOCK.format(signatures=", ".join(_signature(t) for t in tools))
        schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return self.system_prompt + _TOOLS_BLOCK.format(schemas=schemas)

    def encode(self, text: str) -> list[int]:
        """Ids of template text (special tokens such as ``<|im_end|>`` are parsed)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_text(self, text: str) -> list[int]:
        """Ids of env or tool text: special-token parsing off, so ``<|im_start|>`` stays characters."""
        return list(self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    def defuse(self, text: str) -> str:
        """``text`` with every special token's text broken by an invisible character."""
        for tok in getattr(self.tokenizer, "all_special_tokens", ()):
            if len(tok) > 1 and tok in text:
                text = text.replace(tok, tok[0] + _BREAK + tok[1:])
        return text

    def messages_ids(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> list[int]:
        """Ids of ``messages`` rendered by the template, their contents tokenised as env text."""
        marks = [f"\x00PRM{i}\x00" for i in range(len(messages))]
        rendered = self._render(
            [{**m, "content": mk} for m, mk in zip(messages, marks, strict=True)], add_generation_prompt
        )
        ids: list[int] = []
        rest = rendered
        for message, mark in zip(messages, marks, strict=True):
            before, found, after = rest.partition(mark)
            if not found or mark in after:  # the template does not show contents verbatim
                safe = [{**m, "content": self.defuse(m["content"])} for m in messages]
                return self.encode(self._render(safe, add_generation_prompt))
            ids += self.encode(before) + self.encode_text(message["content"])
            rest = after
        return ids + self.encode(rest)

    def prompt_ids(self, observation: str, tools: Sequence[dict[str, Any]]) -> list[int]:
        """Ids of the system prompt, the first observation and the generation prompt."""
        messages = [
            {"role": "system", "content": self.system_message(tools)},
            {"role": "user", "content": observation},
        ]
        return self.messages_ids(messages, True)

    def observation_ids(self, observation: str, sampled: Sequence[int]) -> list[int]:
        """Ids appended after the sampled tokens of an assistant turn: the end of that turn
        (unless the policy already sampled the end-of-turn token), the observation message,
        and the next generation prompt."""
        close = self._close
        eos_text = self.tokenizer.decode([self.eos_token_id])
        if sampled and sampled[-1] == self.eos_token_id and close.startswith(eos_text):
            close = close[len(eos_text) :]
        before, _, after = self._turn_prefix.partition(_MARK)
        return self.encode(close + before) + self.encode_text(observation) + self.encode(after)

    def closing_ids(self, sampled: Sequence[int]) -> list[int]:
        """Ids that close the final assistant turn (empty when the policy sampled them)."""
        if sampled and sampled[-1] == self.eos_token_id:
            return []
        return self.encode(self._close)
