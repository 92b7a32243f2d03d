"""ToolEnv: the multi-turn loop, parsing, tool calls, reward assembly and the info contract.

Every prm/ env subclasses :class:`ToolEnv` and supplies tools, tasks and a prompt; the base
class implements the contract of docs/contract.md once:

* the action is the assistant's raw text for the turn, parsed by :mod:`prm_gym.core.parsing`;
  a malformed action is flagged in ``info["parse"]`` and by the ``rule/format`` term, never
  raised out of :meth:`step`;
* the observation is the new text the env adds: the task prompt at :meth:`reset`, then tool
  results wrapped in ``<tool_response>`` (which agents may not imitate);
* ``reward`` is the sum of the turn's weighted terms, each also reported as ``info["reward_<term>"]``;
  per-judge diagnostics go to ``info["judge"][<id>]`` (both from
  :func:`prm_gym.rewards.score.score_turns`); a failure of an outside service (a judge or tool
  raising :class:`~prm_gym.core.errors.InfraError`: HTTP, sandbox, retriever, deadline) sets
  ``info["reward_status"] = "infra_error"`` instead of scoring the agent, while any other
  exception from a judge is a bug in our code and propagates out of :meth:`step`;
* what each term counts as for the trainer (outcome or process) is :attr:`ToolEnv.reward_kinds`,
  from the judges' declarations (:class:`prm_gym.core.seams.TrainableEnv` is what the trainer needs);
* ``reset(options={"task_id": ...})`` pins a task; :meth:`fork` copies an episode at a turn
  boundary by replaying its actions (verdicts are memoised by content hash and shared).
"""

from __future__ import annotations

import copy
import json
import marshal
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Self

import gymnasium as gym
import numpy as np

from prm_gym.core.errors import ConfigError, TaskError
from prm_gym.core.parsing import MAX_ACTION_CHARS, ParsedAction, ToolCall, parse_action
from prm_gym.core.seams import RewardKind
from prm_gym.core.spaces import UnicodeText
from prm_gym.core.tasks import Task, TaskSet
from prm_gym.core.tool_formats import get_format
from prm_gym.core.tools import Tool, ToolResult
from prm_gym.envs.tool_calls import NO_CALLS, call_tool, cap_text, invoke_tool, tool_info
from prm_gym.rewards.combine import JudgeSpec, parse_judge_spec
from prm_gym.rewards.protocol import AsyncJudge, Judge
from prm_gym.rewards.scorer import TurnScorer
from prm_gym.rewards.types import Turn

#: A turn's tool calls stop being run after this many seconds (:class:`ToolEnv` ``turn_budget_s``).
TURN_BUDGET_S = 20.0

#: The most characters one observation may hold.
MAX_OBS_CHARS = 1 << 20
_RESPONSE_TAGS = ("<tool_response>", "</tool_response>")


def _escape_markup(text: str) -> str:
    for tag in _RESPONSE_TAGS:
        text = text.replace(tag, tag.replace("<", "&lt;").replace(">", "&gt;"))
    return text


class ToolEnv(gym.Env[str, str]):
    """Base class of multi-turn tool-using envs. Subclasses set ``tools``, tasks and a prompt.

    Args:
        tasks: the task set episodes draw from.
        tools: the tools the agent may call.
        judge: a judge expression (``"rule/exact_match + 0.1*rule/format"``) or a JudgeSpec.
        max_turns: turns before the episode is truncated.
        max_action_chars: longer actions are flagged ``action_too_long`` and not executed.
        max_tool_output_chars: each tool output shown to the agent is cut to this length.
        instructions: text appended to every task prompt (answer format, tool hints).
        judge_kwargs: keyword arguments per judge id, e.g. ``{"rule/math_equiv": {"timeout_s": 2}}``.
        turn_budget_s: once a turn's tool calls have taken this long, its remaining calls are not run
            (each answers an error: the agent's failed call). A turn then lasts at most this plus one
            call's own deadline, which is what keeps it inside a server's deadline for one step
            (``prm-serve --call-timeout-s``, 60 s): were the step to miss that, the agent's slow calls
            would come back as ``infra_error``. None: no budget.
        tool_timeout_s: if set, each tool call runs in its own thread and a call that takes longer
            is the agent's failed call (it reads "no result within ..."; an async tool is cancelled,
            a plain function abandoned): a hung tool never blocks the env, and the agent cannot turn
            its arguments into ``infra_error``. A tool raises ``InfraError`` itself for an outside failure.
        tool_format: how the agent writes tool calls: ``hermes`` (default), ``llama3``, ``mistral``,
            ``qwen`` or ``openai`` (docs/tool_formats.md); the trainer sets it from the policy.
        render_mode: ``"ansi"`` or None.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012
    answer_tag = "answer"
    _ctor: tuple[tuple[Any, ...], dict[str, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        obj = super().__new__(cls)
        obj._ctor = (args, kwargs)  # replayed by fork()
        return obj

    def __init__(
        self,
        tasks: TaskSet,
        *,
        tools: Sequence[Tool] = (),
        judge: str | JudgeSpec = "rule/exact_match + 0.1*rule/format",
        max_turns: int = 8,
        max_action_chars: int = MAX_ACTION_CHARS,
        max_tool_output_chars: int = 8192,
        instructions: str = "",
        judge_kwargs: dict[str, dict[str, Any]] | None = None,
        tool_timeout_s: float | None = None,
        turn_budget_s: float | None = TURN_BUDGET_S,
        tool_format: str = "hermes",
        render_mode: str | None = None,
    ):
        if tool_format == "auto":  # train-agent resolves auto from the policy's tokenizer before making envs
            raise ConfigError("tool_format='auto' needs the policy's tokenizer; give the env one such as 'hermes'.")
        self.tool_format = get_format(tool_format).name
        if max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {max_turns}.")
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}.")
        self.tasks = tasks
        self.tools = {t.name: t for t in tools}
        # The schemas as JSON data, marshalled: each read decodes a fresh deep copy (3x faster than json.loads).
        self._schemas = marshal.dumps(json.loads(json.dumps([t.schema for t in self.tools.values()])))
        self.judge_spec = parse_judge_spec(judge)
        self.scorer = TurnScorer(self.judge_spec, judge_kwargs)
        self.judges: list[tuple[float, Judge | AsyncJudge]] = self.scorer.judges
        self.reward_terms: list[str] = self.scorer.reward_terms
        self.reward_kinds: Mapping[str, RewardKind] = self.scorer.reward_kinds
        self.max_turns = max_turns
        self.max_action_chars = max_action_chars
        self.max_tool_output_chars = max_tool_output_chars
        self.instructions = instructions
        self.tool_timeout_s = tool_timeout_s
        if turn_budget_s is not None and not turn_budget_s > 0:
            raise ConfigError(f"turn_budget_s must be > 0 or None, got {turn_budget_s!r}.")
        self.turn_budget_s = turn_budget_s
        self.render_mode = render_mode
        self.action_space = UnicodeText(max_action_chars)
        self.observation_space = UnicodeText(MAX_OBS_CHARS)
        self._task: Task | None = None
        self._done = True
        self._closed = False
        self._actions: list[str] = []
        self._tool_log: list[tuple[ToolResult, ...]] = []  # each turn's tool results, reused by fork()
        self._replaying: deque[tuple[ToolResult, ...]] | None = None
        self._history: list[tuple[str, str]] = []
        self._episode_rng_state: dict[str, Any] | None = None

    # ----------------------------------------------------------------- subclass hooks
    def prompt(self, task: Task) -> str:
        """The observation returned by :meth:`reset` for ``task``."""
        return f"{task.prompt}\n\n{self.instructions}".strip()

    def start_episode(self, task: Task) -> None:
        """Acquire per-episode resources (a database copy, a sandbox)."""

    def end_episode(self) -> None:
        """Release per-episode resources; must be idempotent."""

    def replay_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        """Called by :meth:`fork` for each recorded tool call instead of running the tool again.

        Tools are never re-run on replay (a write, a counter, an external call would happen
        twice); an env whose tools also update the env's own bookkeeping (passages seen, say)
        redoes that here from the recorded ``result``. The default does nothing.
        """

    # ----------------------------------------------------------------- public API
    @property
    def task(self) -> Task | None:
        return self._task

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools in OpenAI function-calling format, for rendering into a chat template."""
        schemas: list[dict[str, Any]] = marshal.loads(self._schemas)
        return schemas

    @property
    def actions(self) -> list[str]:
        """The actions taken so far this episode."""
        return list(self._actions)

    def gold_actions(self, task: Task) -> list[str]:
        """The actions that solve ``task`` (``prm-play --policy gold`` replays them to check a task
        file): one turn submitting the gold answer (the first of a list). An env whose tasks need
        more (tool calls first) overrides this.

        Raises:
            TaskError: the task has no gold answer.
        """
        answer = task.answer[0] if isinstance(task.answer, (list, tuple)) and task.answer else task.answer
        if answer is None or answer == [] or answer == ():
            raise TaskError(f"task {task.id!r} has no gold answer; give it an 'answer' to check it with --policy gold.")
        return [f"<{self.answer_tag}>{answer}</{self.answer_tag}>"]

    def defer_group_judges(self, on: bool = True) -> list[str]:
        """Leave the judges that score a whole group at once (``group_batched = True``: IGPO's
        ``progress/info_gain``) to the caller, or (``on=False``) score them every step again.

        While deferred, :meth:`step` leaves such a judge out of the turn's reward and terms and
        reports ``info["judge"][<id>] = {"deferred": 1}``; the caller takes the episode's turns
        with :meth:`take_deferred_turns` and scores a group's together
        (:func:`prm_gym.training.group_judges.score_deferred` does, in the rollout workers).

        Returns:
            The ids of the judges now deferred (empty: nothing changes).
        """
        return self.scorer.defer_group_judges(on)

    @property
    def deferred_judges(self) -> list[tuple[float, Judge | AsyncJudge]]:
        """``(weight, judge)`` of the judges :meth:`defer_group_judges` left to the caller."""
        return self.scorer.deferred_judges

    def take_deferred_turns(self) -> list[Turn]:
        """The episode's turns so far (one per :meth:`step`, in order) while judges are deferred;
        they are forgotten here."""
        return self.scorer.take_deferred_turns()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self._closed:
            raise gym.error.Error("reset() on a closed env; make a new one.")
        opts = options or {}
        task = self.tasks.get(opts["task_id"]) if "task_id" in opts else self.tasks.sample(self.np_random)
        self._episode_rng_state = dict(self.np_random.bit_generator.state)  # a fresh dict per call
        return self._begin(task)

    def _begin(self, task: Task) -> tuple[str, dict[str, Any]]:
        self.end_episode()
        self._task, self._done = task, False
        self._actions, self._history, self._tool_log = [], [], []
        self.scorer.new_episode()
        self.start_episode(task)
        obs = cap_text(self.prompt(task), MAX_OBS_CHARS)
        return obs, {"task_id": task.id, "turn": 0, "tools": self.tool_schemas}

    def parse(self, action: Any) -> ParsedAction:
        """``action`` read as :meth:`step` reads it (this env's answer tag, length cap, tool format)."""
        return parse_action(
            action, answer_tag=self.answer_tag, max_chars=self.max_action_chars, tool_format=self.tool_format
        )

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._closed:  # its tools and judges may be gone: a step would score against nothing
            raise gym.error.Error("step() on a closed env; make a new one.")
        if self._task is None or self._done:
            raise gym.error.ResetNeeded("The episode is over (or never started); call reset().")
        parsed = self.parse(action)
        ok = not parsed.issues
        recorded = self._replaying.popleft() if self._replaying is not None else None  # fork() replay
        results = self._run_tools(parsed.tool_calls, recorded) if ok and parsed.tool_calls else []
        terminated = ok and parsed.answer is not None
        index = len(self._actions)
        truncated = not terminated and index + 1 >= self.max_turns
        obs = self.observe(parsed, results, terminated)
        done_calls = tuple(results)
        turn = Turn(self._task, index, parsed.text, parsed, done_calls, tuple(self._history), terminated)
        terms, judge_info, judge_failed, reward = self.scorer.score(turn)
        info: dict[str, Any] = terms  # info starts as the reward terms
        infra = judge_failed or (bool(results) and any(r.infra_error for r in results))
        self._actions.append(parsed.text)
        self._tool_log.append(done_calls)
        self._history.append((parsed.text, obs))
        self._done = terminated or truncated
        info["reward_status"] = "infra_error" if infra else "ok"
        info["task_id"] = self._task.id
        info["turn"] = index + 1
        info["answer"] = parsed.answer if terminated and parsed.answer is not None else ""
        info["judge"] = judge_info
        info["parse"] = {"ok": ok, "issues": ",".join([i.code for i in parsed.issues]) if parsed.issues else ""}
        info["tool"] = tool_info(results) if results else NO_CALLS.copy()
        return obs, reward, terminated, truncated, info

    def observe(self, parsed: ParsedAction, results: Sequence[ToolResult], terminated: bool) -> str:
        """The observation after a turn: format errors, or the tool results."""
        if not parsed.ok:
            return parsed.describe_issues()
        if terminated:
            return "Answer received."
        blocks = [f"<tool_response>\n{_escape_markup(r.output)}\n</tool_response>" for r in results]
        return cap_text("\n".join(blocks), MAX_OBS_CHARS)

    def fork(self) -> Self:
        """A new env at this env's current turn boundary, built by replaying its actions.

        The copy has the same constructor arguments, task and RNG state. Replay reuses the
        recorded tool results instead of calling the tools again (tools may have side effects;
        see :meth:`replay_tool_result`), and judge verdicts are memoised by content hash and
        shared, so replayed turns cost no tool or judge calls.
        """
        if self._task is None or self._episode_rng_state is None:
            raise gym.error.ResetNeeded("fork() needs a started episode; call reset() first.")
        args, kwargs = self._ctor
        clone = type(self)(*args, **kwargs)
        clone.scorer.memo = self.scorer.memo
        clone._np_random = np.random.Generator(np.random.PCG64())
        clone._np_random.bit_generator.state = copy.deepcopy(self._episode_rng_state)
        clone._episode_rng_state = copy.deepcopy(self._episode_rng_state)
        clone._begin(self._task)
        clone._replaying = deque(self._tool_log)
        try:
            for action in self._actions:
                clone.step(action)
        finally:
            clone._replaying = None
        return clone

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        lines = [f"task {self._task.id if self._task else '-'}"]
        for i, (act, obs) in enumerate(self._history, 1):
            lines += [f"[turn {i}] agent: {act}", f"[turn {i}] env: {obs}"]
        return "\n".join(lines)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.end_episode()
        super().close()

    # ----------------------------------------------------------------- internals
    def _run_tools(self, calls: Sequence[ToolCall], recorded: tuple[ToolResult, ...] | None) -> list[ToolResult]:
        """Run this turn's calls, or during :meth:`fork` replay take the ``recorded`` results."""
        if recorded is None:
            end = time.monotonic() + (self.turn_budget_s if self.turn_budget_s is not None else math.inf)
            # a call started within the budget runs to its own deadline
            return [self._call_tool(c) if time.monotonic() < end else self._over_budget(c) for c in calls]
        if len(recorded) != len(calls):
            raise RuntimeError(f"fork replay: a turn recorded {len(recorded)} tool results for {len(calls)} calls")
        for call, result in zip(calls, recorded, strict=True):
            self.replay_tool_result(call, result)
        return list(recorded)

    def _over_budget(self, call: ToolCall) -> ToolResult:
        """The agent's failed call, not run: the turn's earlier calls spent :attr:`turn_budget_s`."""
        text = f"Error: not run; this turn's earlier tool calls used its {self.turn_budget_s:g}s budget."
        return ToolResult(call.name, False, text)

    def _call_tool(self, call: ToolCall) -> ToolResult:
        return call_tool(self.tools, call, self.max_tool_output_chars, self._invoke)

    def _invoke(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        """Call a tool (an env may wrap this: :class:`prm_gym.envs.math.slow_tools` adds latency)."""
        return invoke_tool(tool, arguments, self.tool_timeout_s)
