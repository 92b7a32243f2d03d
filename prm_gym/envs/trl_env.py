"""Any ``prm/*`` env as a TRL ``GRPOTrainer`` environment: its tools as methods, its terms as rewards.

TRL (1.16) trains multi-turn tool use through ``GRPOTrainer(environment_factory=...)``: a
zero-argument callable returning an object whose public methods are the tools (their schemas
come from the type hints and Google docstrings), with ``reset(**row)`` returning the text to
append to the last user message. :class:`TRLEnv` builds such a class for any registered env::

    from trl import GRPOConfig, GRPOTrainer
    from prm_gym.envs.trl_env import TRLEnv, tool_chat_tokenizer

    env = TRLEnv("prm/Math-v0")
    trainer = GRPOTrainer(
        model, args=GRPOConfig(...), processing_class=tool_chat_tokenizer(tokenizer),
        environment_factory=env, train_dataset=env.dataset(64), reward_funcs=env.reward_funcs(),
    )

How a TRL rollout maps onto the env's turns:

* ``reset`` pins the row's ``task_id`` (and ``seed``) and returns the env's task prompt;
* every tool call the model makes is one env turn (``env.step`` of that call), so the env runs
  the tool and scores the turn with its own judges (format, tool use, process terms);
* when generation ends, the reward functions step the final assistant message (the answer) as
  the last turn, unless the episode already ended (turn budget) or the message was a tool call.

:meth:`TRLEnv.reward_funcs` gives one reward function per reward term of the env (``outcome``,
``format``, ``tool``, ...), each returning the episode's sum of that term, so TRL's weighted sum
(weights 1) is the env's episode return and TRL logs every term (``rewards/prm_outcome/mean``).
An episode with a turn whose ``reward_status`` is ``infra_error`` gets ``None`` from every
function (left out of the statistics, never scored 0), as in the env's own trainer; the counts
go to TRL's logs as ``prm/infra_errors`` and ``prm/turns``.

Text the model writes beside its tool calls is not seen by the env (TRL hands only the parsed
calls to the tools).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from prm_gym.core.errors import ConfigError
from prm_gym.core.parsing import format_tool_call
from prm_gym.rewards.trl_adapter import RewardFunc, message_text

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool,
                               "array": list, "object": dict}  # fmt: skip
_RESERVED = frozenset({"reset", "get_reward"})
_WRAP = re.compile(r"\A<tool_response>\n(.*)\n</tool_response>\Z", re.DOTALL)


class _Episode:
    """What a rollout accumulated: each term's sum, turns, and whether infrastructure failed."""

    def __init__(self, terms: Sequence[str]):
        self.terms = {t: 0.0 for t in terms}
        self.turns = 0
        self.infra = False
        self.done = False
        self.finished = False

    def add(self, terminated: bool, truncated: bool, info: Mapping[str, Any]) -> None:
        self.turns += 1
        for term in self.terms:
            self.terms[term] += float(info.get(f"reward_{term}", 0.0))
        self.infra = self.infra or info.get("reward_status") == "infra_error"
        self.done = terminated or truncated


class PRMEnvironment:
    """The base of the classes :class:`TRLEnv` makes: one gym env, stepped by tool calls.

    Only ``reset`` and the tool methods are public (TRL exposes every other public method as a tool).
    """

    _env_id: str = ""
    _env_kwargs: Mapping[str, Any] = {}

    def __init__(self) -> None:
        kwargs = {"tool_format": "hermes", **self._env_kwargs}
        self._env = gym.make(self._env_id, **kwargs)
        self._terms: list[str] = list(getattr(self._env.unwrapped, "reward_terms", []))
        self._episode = _Episode(self._terms)
        self._episode.done = True

    def reset(self, **row: Any) -> str:
        """Start an episode on the row's ``task_id`` (a random task if absent); returns the task prompt."""
        task_id, seed = row.get("task_id"), row.get("seed")
        options = {"task_id": str(task_id)} if task_id not in (None, "") else None
        obs, _ = self._env.reset(seed=None if seed is None else int(seed), options=options)
        self._episode = _Episode(self._terms)
        return str(obs)

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._episode.done:
            return "The episode is over (its turn budget is spent); no tool ran. Reply with your final answer."
        obs, _, terminated, truncated, info = self._env.step(format_tool_call(name, arguments))
        self._episode.add(terminated, truncated, info)
        found = _WRAP.match(str(obs))
        return found.group(1) if found else str(obs)

    def _finish(self, completion: Any) -> _Episode:
        """Step the completion's final answer once (idempotent); the episode's totals."""
        ep = self._episode
        if ep.finished:
            return ep
        ep.finished = True
        messages = [completion] if isinstance(completion, str) else list(completion)
        last = next((m for m in reversed(messages) if isinstance(m, str) or m.get("role") == "assistant"), None)
        if last is None or ep.done or (not isinstance(last, str) and last.get("tool_calls")):
            return ep
        _, _, terminated, truncated, info = self._env.step(last if isinstance(last, str) else message_text(last))
        ep.add(terminated, truncated, info)
        return ep

    def __del__(self) -> None:
        env = getattr(self, "_env", None)
        if env is not None:
            env.close()


def _tool_method(schema: Mapping[str, Any]) -> Any:
    """A method named after the tool, with the signature and Google docstring TRL reads its schema from."""
    fn = schema.get("function", schema)
    name = str(fn["name"])
    if not name.isidentifier() or name in _RESERVED or name.startswith("_"):
        raise ConfigError(f"tool {name!r} cannot be a TRL environment method; rename it (a Python identifier).")
    params = fn.get("parameters", {}) or {}
    props: Mapping[str, Any] = params.get("properties", {}) or {}
    required = set(params.get("required", []) or [])
    sig = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    lines = [str(fn.get("description") or name).strip(), ""]
    if props:
        lines.append("Args:")
    for arg, spec in props.items():
        hint = _JSON_TYPES.get(str(spec.get("type")), str)
        annotations[arg] = hint if arg in required else hint | None
        default = inspect.Parameter.empty if arg in required else None
        sig.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotations[arg]))
        desc = " ".join(str(spec.get("description") or arg).split())
        if "enum" in spec:
            desc += f" (choices: {list(spec['enum'])!r})".replace("'", '"')
        lines.append(f"    {arg}: {desc}")

    def method(self: PRMEnvironment, **kwargs: Any) -> str:
        return self._call(name, {k: v for k, v in kwargs.items() if v is not None or k in required})

    method.__name__ = method.__qualname__ = name
    method.__doc__ = "\n".join(lines)
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(sig, return_annotation=str)  # type: ignore[attr-defined]
    return method


class TRLEnv:
    """A TRL ``environment_factory`` for a registered env, with its dataset and reward functions.

    Args:
        env_id: a registered id such as ``prm/Math-v0``.
        env_kwargs: keyword arguments for ``gym.make`` (``tool_format`` is ``hermes`` unless given).

    Raises:
        ConfigError: a tool name cannot be a Python method name.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None):
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        probe = gym.make(env_id, **{"tool_format": "hermes", **self.env_kwargs})
        try:
            base = probe.unwrapped
            schemas = list(getattr(base, "tool_schemas", []))
            self.terms: list[str] = list(getattr(base, "reward_terms", []))
            tasks = getattr(base, "tasks", None)
            self.task_ids: list[str] = list(tasks.ids) if tasks is not None else []
        finally:
            probe.close()
        methods = {str(s.get("function", s)["name"]): _tool_method(s) for s in schemas}
        attrs = {"_env_id": env_id, "_env_kwargs": self.env_kwargs, **methods}
        name = re.sub(r"\W", "_", env_id.split("/")[-1])
        #: The environment class (TRL lists its public methods as the tools).
        self.environment_class: type[PRMEnvironment] = type(name, (PRMEnvironment,), attrs)

    def __call__(self) -> PRMEnvironment:
        """A new environment instance (TRL calls this once per concurrent rollout)."""
        return self.environment_class()

    def dataset(self, n: int | None = None, seed: int = 0, system: str | None = None) -> Any:
        """A ``datasets.Dataset`` of ``n`` rows (default: one per task), each naming a ``task_id``
        (cycling through the env's tasks) and a ``seed``; the prompt is filled in by ``reset``."""
        from datasets import Dataset

        if not self.task_ids:
            raise ConfigError(f"{self.env_id} lists no task ids; build the dataset with task_id columns yourself.")
        count = len(self.task_ids) if n is None else n
        head = [{"role": "system", "content": system}] if system else []
        rows = [
            {"prompt": [*head, {"role": "user", "content": ""}], "task_id": self.task_ids[i % len(self.task_ids)],
             "seed": seed + i}
            for i in range(count)
        ]  # fmt: skip
        return Dataset.from_list(rows)

    def reward_funcs(self) -> list[RewardFunc]:
        """One reward function per reward term (named ``prm_<term>``), in the env's term order."""
        return [EpisodeTerm(term, log=i == 0) for i, term in enumerate(self.terms)]


class EpisodeTerm:
    """A TRL reward function: one reward term summed over each rollout's env turns.

    Args:
        term: the term (``outcome``, ``format``, ...).
        log: also log ``prm/turns`` and ``prm/infra_errors`` (one function of a set does).
    """

    def __init__(self, term: str, log: bool = False):
        self.term = term
        self.log = log
        self.__name__ = f"prm_{term}"

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], environments: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:  # fmt: skip
        if environments is None:
            raise ConfigError("prm_gym EpisodeTerm rewards need GRPOTrainer(environment_factory=TRLEnv(...)).")
        episodes = [env._finish(c) for env, c in zip(environments, completions, strict=True)]
        log_metric = kwargs.get("log_metric")
        if self.log and callable(log_metric) and episodes:
            log_metric("prm/turns", sum(e.turns for e in episodes) / len(episodes))
            log_metric("prm/infra_errors", float(sum(e.infra for e in episodes)))
        return [None if e.infra else e.terms.get(self.term, 0.0) for e in episodes]


def tool_chat_tokenizer(tokenizer: Any) -> Any:
    """``tokenizer`` with a chat template TRL can run tool calls through, when it lacks one.

    A ChatML tokenizer (``<|im_start|>``/``<|im_end|>``: SmolLM2, Qwen, the tiny test model) whose
    template cannot render tools gets TRL's Qwen2.5 template (Hermes ``<tool_call>`` markup, the
    tools listed in the system message), which TRL knows how to parse. Other tokenizers are
    returned unchanged (TRL then says whether their template supports tools).
    """
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    if supports_tool_calling(tokenizer):
        return tokenizer
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
        tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer
