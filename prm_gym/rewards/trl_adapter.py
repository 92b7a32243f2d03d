"""prm-gym judges as TRL ``GRPOTrainer`` reward functions.

TRL calls each reward function as ``func(prompts=..., completions=..., completion_ids=..., **columns)``
where ``columns`` holds every other dataset column (one list entry per completion) plus
``trainer_state``, ``log_extra`` and ``log_metric``; it expects one float per completion and
treats ``None`` as "not scored" (the completion is left out of that function's statistics)::

    from prm_gym.rewards.trl_adapter import trl_rewards

    funcs, weights = trl_rewards("rule/math_equiv + 0.1*rule/format")
    trainer = GRPOTrainer(model, reward_funcs=funcs,
                          args=GRPOConfig(reward_weights=weights, ...), train_dataset=ds)

The dataset needs the gold answer in an ``answer`` column (``answer_column=`` to change it): a judge
that compares with it (``needs_answer``: rule/math_equiv, rule/exact_match, rule/f1, tool/efficiency)
raises :class:`~prm_gym.core.errors.ConfigError` when the column is absent or a row has none;
optional ``task_id`` and ``meta`` columns reach the judges as :class:`prm_gym.core.tasks.Task` fields.
Prompts and completions may be plain strings or conversations (lists of ``{"role", "content"}``
messages, assistant ``tool_calls`` included). Each completion is judged as one final turn: its
last assistant message is the action, earlier assistant/tool exchanges are the history.

A judge whose outside service fails (an :class:`prm_gym.core.errors.InfraError` such as
:class:`~prm_gym.core.errors.JudgeError`, or a non-finite score) yields ``None`` for that
completion, never a 0.0, mirroring the env's ``reward_status="infra_error"``. Any other exception
is a bug in the judge and propagates, as it does out of ``env.step()``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prm_gym.core.errors import ConfigError, InfraError
from prm_gym.core.parsing import format_tool_call, parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards.combine import JudgeSpec, parse_judge_spec
from prm_gym.rewards.protocol import AsyncJudge, Judge, score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

Completion = str | Sequence[Mapping[str, Any]]
_TRL_EXTRAS = frozenset({"completion_ids", "trainer_state", "log_extra", "log_metric"})
"""What TRL passes beside the dataset's columns."""
#: TRL's custom reward function type: ``(prompts, completions, **columns) -> list[float | None]``.
RewardFunc = Callable[..., list[float | None]]


def message_text(message: Mapping[str, Any]) -> str:
    """The text of one chat message: its content, then its structured tool calls as Hermes markup."""
    content = message.get("content") or ""
    if isinstance(content, list):  # multimodal-style content parts
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    parts = [str(content)] if content else []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {"_raw": args}
        parts.append(format_tool_call(str(fn.get("name", "")), args if isinstance(args, dict) else {"_raw": args}))
    return "\n".join(parts)


def prompt_text(prompt: Completion) -> str:
    """The task prompt: a string as is, or the last user message of a conversation."""
    if isinstance(prompt, str):
        return prompt
    users = [message_text(m) for m in prompt if m.get("role") == "user"]
    return users[-1] if users else "\n".join(message_text(m) for m in prompt)


def completion_turns(completion: Completion) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Split a completion into the final action and the earlier ``(action, observation)`` pairs."""
    if isinstance(completion, str):
        return completion, ()
    history: list[tuple[str, str]] = []
    action: str | None = None
    observation: list[str] = []
    for message in completion:
        if message.get("role") == "assistant":
            if action is not None:
                history.append((action, "\n".join(observation)))
            action, observation = message_text(message), []
        elif action is not None:
            observation.append(message_text(message))
    return action or "", tuple(history)


def _column(kwargs: Mapping[str, Any], name: str, i: int, default: Any) -> Any:
    values = kwargs.get(name)
    if values is None or i >= len(values):
        return default
    return values[i]


def build_turns(
    prompts: Sequence[Completion],
    completions: Sequence[Completion],
    columns: Mapping[str, Any],
    answer_column: str = "answer",
) -> list[Turn]:
    """One final :class:`Turn` per completion, with the task rebuilt from the dataset columns."""
    turns = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        meta = _column(columns, "meta", i, None)
        task = Task(
            id=str(_column(columns, "task_id", i, f"trl-{i}")),
            prompt=prompt_text(prompt),
            answer=_column(columns, answer_column, i, None),
            meta=dict(meta) if isinstance(meta, Mapping) else {},
        )
        action, history = completion_turns(completion)
        turns.append(Turn(task, len(history), action, parse_action(action), (), history, final=True))
    return turns


class JudgeReward:
    """One judge as a TRL reward function (picklable; TRL logs it under ``__name__``).

    Args:
        judge: the judge instance.
        answer_column: the dataset column with the gold answer.
    """

    def __init__(self, judge: Judge | AsyncJudge, answer_column: str = "answer"):
        self.judge = judge
        self.answer_column = answer_column
        self.__name__ = re.sub(r"\W", "_", judge.name)

    def __call__(
        self, prompts: Sequence[Completion], completions: Sequence[Completion], **kwargs: Any
    ) -> list[float | None]:
        if getattr(self.judge, "needs_answer", False):
            self._check_answers(kwargs, len(completions))
        turns = build_turns(prompts, completions, kwargs, self.answer_column)
        scores = self.score(turns)
        failures = sum(s is None for s in scores)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric(f"{self.__name__}/infra_errors", float(failures))
        return scores

    def _check_answers(self, columns: Mapping[str, Any], n: int) -> None:
        """A judge that compares with the gold answer gets one for every completion, or a ConfigError: scored
        against nothing, every completion would be a silent 0.0."""
        golds = columns.get(self.answer_column)
        if golds is None:
            seen = sorted(k for k in columns if k not in _TRL_EXTRAS)
            raise ConfigError(
                f"{self.judge.name} compares with the gold answer, and the dataset has no {self.answer_column!r} "
                f"column (its columns: {seen}); name the gold answer's column with answer_column=."
            )
        missing = [i for i in range(n) if i >= len(golds) or golds[i] is None]
        if missing:
            raise ConfigError(
                f"{self.judge.name} compares with the gold answer, and {len(missing)} of {n} completions have none "
                f"in the {self.answer_column!r} column (the first: {missing[0]})."
            )

    def score(self, turns: Sequence[Turn]) -> list[float | None]:
        """Scores in order; ``None`` where the judge failed. One batch call, per-turn on failure."""
        try:
            return [_finite(v.score) for v in score_batch(self.judge, list(turns))]
        except InfraError:
            if len(turns) == 1:
                return [None]
        out: list[float | None] = []
        for turn in turns:
            out.extend(self.score([turn]))
        return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def trl_rewards(
    judge: str | JudgeSpec,
    *,
    answer_column: str = "answer",
    judge_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[RewardFunc], list[float]]:
    """TRL reward functions for a judge expression, and the weights for ``GRPOConfig.reward_weights``.

    One function per judge, so TRL logs each term (``rewards/rule_format/mean``) and ``None``
    from one failing judge leaves the others' scores usable. Options after ``;`` (credit
    assignment across turns) do not apply to single-completion rewards and are ignored.

    Args:
        judge: a judge expression such as ``"rule/math_equiv + 0.1*rule/format"``.
        answer_column: the dataset column with the gold answer.
        judge_kwargs: keyword arguments per judge id.

    Raises:
        ConfigError: the expression is malformed or names an unknown judge.
    """
    spec = parse_judge_spec(judge)
    kw = judge_kwargs or {}
    funcs: list[RewardFunc] = [JudgeReward(make_judge(jid, **kw.get(jid, {})), answer_column) for _, jid in spec.items]
    return funcs, [w for w, _ in spec.items]


def trl_reward_func(judge: str | JudgeSpec, **kwargs: Any) -> RewardFunc:
    """A single TRL reward function returning the weighted sum of the expression's judges.

    A completion any judge failed on gets ``None``. Takes the keyword arguments of :func:`trl_rewards`.
    """
    funcs, weights = trl_rewards(judge, **kwargs)
    return WeightedReward(funcs, weights, name="__".join(f.__name__ for f in funcs))


class WeightedReward:
    """The weighted sum of several :class:`JudgeReward` functions, ``None`` if any part is."""

    def __init__(self, funcs: Sequence[RewardFunc], weights: Sequence[float], name: str):
        self.funcs, self.weights, self.__name__ = list(funcs), list(weights), name

    def __call__(
        self, prompts: Sequence[Completion], completions: Sequence[Completion], **kwargs: Any
    ) -> list[float | None]:
        parts = [f(prompts, completions, **kwargs) for f in self.funcs]
        out: list[float | None] = []
        for scores in zip(*parts, strict=True):
            ok = all(s is not None for s in scores)
            out.append(sum(w * s for w, s in zip(self.weights, scores, strict=True) if s is not None) if ok else None)
        return out
