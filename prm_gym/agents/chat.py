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

The tool block describes the tool-call format the env parses (``tool_format``, see
:mod:`prm_gym.core.tool_formats`); where the tokenizer's own template renders ``tools=`` in that
format, ``tools_block="native"`` (the default of ``"auto"``) lets it write the tools instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.tool_formats import get_format

DEFAULT_SYSTEM = "You are a careful assistant that solves tasks step by step and uses tools when they help."

_TOOLS_HEAD = """

# Tools

You may call one or more of these tools. Their JSON schemas are inside <tools></tools>:
<tools>
{schemas}
</tools>

"""
_TOOLS_TAIL = "\nTool results come back inside <tool_response></tool_response>."
TOOLS_BLOCKS = ("auto", "full", "compact", "native")
#: A tool schema rendered once to learn whether a template writes ``tools=`` at all.
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "prm_probe_tool",
        "description": "Probe.",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
    },
}

_MARK = "\x00MARK\x00"
#: Inserted after the first character of a special token's text found in env text, where a
#: template does not render message contents verbatim (so they cannot be tokenised apart).
_BREAK = "\u2060"

_COMPACT_BLOCK = """
Tools: {signatures}. Call one as {syntax}."""


def _signature(tool: dict[str, Any]) -> str:
    fn = tool.get("function", tool)
    props = fn.get("parameters", {}).get("properties", {})
    return f"{fn.get('name', '?')}({', '.join(props)})"


#: Markers a chat template uses for its tool calls, most specific first.
_TEMPLATE_MARKERS = (("[TOOL_CALLS]", "mistral"), ("<|python_tag|>", "llama3"), ("<function=", "qwen"))


def template_text(tokenizer: Any) -> str:
    """The source of a tokenizer's chat template(s) (named templates joined), or ``""``."""
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):
        return "\n".join(str(v) for v in tpl.values())
    if isinstance(tpl, list):
        return "\n".join(str(t.get("template", "")) if isinstance(t, dict) else str(t) for t in tpl)
    return tpl if isinstance(tpl, str) else ""


def detect_tool_format(tokenizer: Any) -> str:
    """The tool-call format a tokenizer's chat template teaches, read from its markers.

    ``[TOOL_CALLS]``: mistral; ``<|python_tag|>`` or a ``"parameters"`` call rendered for an
    ``ipython`` role: llama3; ``<function=`` (Qwen3-Coder's XML): qwen; ``<tool_call>``: hermes,
    or qwen when the tokenizer's name says it is a Coder model (Qwen2.5-Coder shares Qwen2.5's
    template but writes its calls differently); anything else: hermes.
    """
    text = template_text(tokenizer)
    for marker, name in _TEMPLATE_MARKERS:
        if marker in text:
            return name
    if '"parameters"' in text and "ipython" in text:
        return "llama3"
    if "<tool_call>" in text and "coder" in str(getattr(tokenizer, "name_or_path", "")).lower():
        return "qwen"
    return "hermes"


def resolve_tool_format(requested: str, tokenizer: Any = None) -> str:
    """``requested``, checked; ``"auto"`` becomes the format detected from ``tokenizer`` (hermes without one)."""
    if requested == "auto":
        return detect_tool_format(tokenizer) if tokenizer is not None else "hermes"
    return get_format(requested).name


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template writes the schemas passed as ``tools=`` (transformers'
    ``apply_chat_template(..., tools=[...])``): a probe tool's name must appear in the rendering."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    try:
        text = tokenizer.apply_chat_template(messages, tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True)
    except Exception:  # a third-party template that cannot take tools (it raises, or rejects the argument)
        return False
    return "prm_probe_tool" in str(text)


#: The roles a chat template may give tool results, in the order tried (Llama 3.1 renders both as ``ipython``).
TOOL_ROLES = ("tool", "ipython")


def tool_role(tokenizer: Any) -> str | None:
    """The role in which the tokenizer's chat template renders tool results (``tool`` or
    ``ipython``): the first of :data:`TOOL_ROLES` that the template names (``'tool'`` in its source)
    and renders, content shown, differently from a user message; None when it has none (a generic
    ChatML template prints any role name, but no model learnt to read results there)."""
    source = template_text(tokenizer)
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]

    def render(role: str) -> str | None:
        try:
            text = tokenizer.apply_chat_template(
                [*base, {"role": role, "content": _MARK}], tokenize=False, add_generation_prompt=True
            )
        except Exception:  # a template that refuses the role (or a tool message without a call id)
            return None
        return str(text) if _MARK in str(text) else None

    user = render("user")
    for role in TOOL_ROLES:
        if f"'{role}'" not in source and f'"{role}"' not in source:
            continue
        text = render(role)
        if text is not None and text != user:
            return role
    return None


class ChatTemplate:
    """Renders prompts and observations with a tokenizer's chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        system_prompt: the system message before the tool block.
        observation_role: the role observations are sent as; ``"auto"``: the template's tool role
            (``tool``, or ``ipython`` where only that one renders: :func:`tool_role`) when the tools
            are written by the template itself (``tools_block`` native), else ``"user"``, which
            every template takes (the env already wraps tool results in ``<tool_response>``).
        tools_block: ``"full"`` lists the tools' JSON schemas and the call syntax of ``tool_format``;
            ``"compact"`` only their signatures and the call syntax (a few dozen tokens: for tiny
            byte-level models); ``"native"`` passes the schemas to the tokenizer's template as
            ``tools=``; ``"auto"`` is native where the template renders tools and teaches the same
            format as ``tool_format``, else full.
        tool_format: the tool-call format the prompt teaches (and the env must parse): a name of
            :data:`prm_gym.core.tool_formats.FORMATS`, or ``"auto"`` to read it from the template.
            :attr:`tool_format` holds the resolved name.
    """

    def __init__(
        self,
        tokenizer: Any,
        system_prompt: str = DEFAULT_SYSTEM,
        observation_role: str = "auto",
        tools_block: str = "full",
        tool_format: str = "hermes",
    ):
        if tools_block not in TOOLS_BLOCKS:
            raise ConfigError(f"tools_block must be one of {', '.join(TOOLS_BLOCKS)}; got {tools_block!r}.")
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the tokenizer has no chat_template; set tokenizer.chat_template first.")
        self.tool_format = resolve_tool_format(tool_format, tokenizer)
        self.tools_block = self._resolve_block(tools_block, tokenizer)
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        native_role = tool_role(tokenizer) if self.tools_block == "native" and observation_role == "auto" else None
        self.observation_role = observation_role if observation_role != "auto" else native_role or "user"
        self.eos_token_id: int = tokenizer.eos_token_id
        self._close, self._turn_prefix = self._template_pieces()

    def env_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` for ``gym.make`` with the env parsing :attr:`tool_format`, the format this
        prompt teaches (left out for hermes, every env's default, so envs without the argument build).

        Raises:
            ConfigError: ``kwargs`` already name another ``tool_format``.
        """
        given = kwargs.get("tool_format")
        if given is not None and given != self.tool_format:
            raise ConfigError(
                f"env_kwargs tool_format={given!r} disagrees with the policy's tool format {self.tool_format!r}; "
                f"pass --tool-format {given} instead (the prompt must teach the format the env parses)."
            )
        return dict(kwargs) if self.tool_format == "hermes" else {**kwargs, "tool_format": self.tool_format}

    def _resolve_block(self, tools_block: str, tokenizer: Any) -> str:
        """``tools_block`` with ``auto`` decided, checked against what the template can do."""
        if tools_block not in ("auto", "native"):
            return tools_block
        native = renders_tools(tokenizer) and detect_tool_format(tokenizer) == self.tool_format
        if tools_block == "native" and not native:
            raise ConfigError(
                f"tools_block='native' needs a chat template that renders tools= in the {self.tool_format} "
                "format; this tokenizer's does not. Use tools_block='full' (or 'auto')."
            )
        return "native" if native else "full"

    def _render(
        self,
        messages: list[dict[str, str]],
        add_generation_prompt: bool,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> str:
        kwargs: dict[str, Any] = {"tools": list(tools)} if tools else {}
        return str(
            self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
            )
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
        """The system prompt with our tool block (without one under ``native``: the template writes it)."""
        if not tools or self.tools_block == "native":
            return self.system_prompt
        fmt = get_format(self.tool_format)
        if self.tools_block == "compact":
            signatures = ", ".join(_signature(t) for t in tools)
            return self.system_prompt + _COMPACT_BLOCK.format(signatures=signatures, syntax=fmt.syntax)
        schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return self.system_prompt + _TOOLS_HEAD.format(schemas=schemas) + fmt.how_to_call + _TOOLS_TAIL

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

    def messages_ids(
        self,
        messages: Sequence[dict[str, str]],
        add_generation_prompt: bool,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[int]:
        """Ids of ``messages`` (and ``tools``, for a template that renders them) rendered by the
        template, their contents tokenised as env text."""
        marks = [f"\x00PRM{i}\x00" for i in range(len(messages))]
        rendered = self._render(
            [{**m, "content": mk} for m, mk in zip(messages, marks, strict=True)], add_generation_prompt, tools
        )
        ids: list[int] = []
        rest = rendered
        for message, mark in zip(messages, marks, strict=True):
            before, found, after = rest.partition(mark)
            if not found or mark in after:  # the template does not show contents verbatim
                safe = [{**m, "content": self.defuse(m["content"])} for m in messages]
                return self.encode(self._render(safe, add_generation_prompt, tools))
            ids += self.encode(before) + self.encode_text(message["content"])
            rest = after
        return ids + self.encode(rest)

    def prompt_ids(self, observation: str, tools: Sequence[dict[str, Any]]) -> list[int]:
        """Ids of the system prompt, the first observation and the generation prompt."""
        messages = [
            {"role": "system", "content": self.system_message(tools)},
            {"role": "user", "content": observation},
        ]
        return self.messages_ids(messages, True, tools if self.tools_block == "native" else None)

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
