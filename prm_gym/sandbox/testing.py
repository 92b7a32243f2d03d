"""FakeSandbox: a scripted sandbox for unit tests of code that takes a :class:`Sandbox`.

It never executes anything: each ``run`` returns the next scripted :class:`ExecResult` (or
raises the next scripted exception, e.g. :class:`prm_gym.core.errors.SandboxError` to simulate a dead
backend) and records the programs it was given. Use the real backends (``make_sandbox``) to test
isolation itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Self

from prm_gym.core.errors import SandboxError
from prm_gym.sandbox.protocol import MAIN_FILE
from prm_gym.sandbox.types import ExecResult, Limits

Script = Sequence[ExecResult | BaseException] | Callable[[dict[str, str], str], ExecResult]


class FakeSandbox:
    """A sandbox whose results are scripted.

    Args:
        script: results (or exceptions) returned in turn and cycled, or a function
            ``(files, stdin) -> ExecResult``.
        limits: reported limits (not enforced).
    """

    name = "fake"

    def __init__(self, script: Script = (), limits: Limits | None = None):
        self.script = script
        self.limits = limits or Limits()
        self.calls: list[tuple[dict[str, str], str]] = []
        self.closed = False

    def run(
        self,
        code: str | None = None,
        *,
        files: Mapping[str, str] | None = None,
        entry: str = MAIN_FILE,
        stdin: str = "",
        timeout: float | None = None,
    ) -> ExecResult:
        if self.closed:
            raise SandboxError("fake: run() on a closed sandbox; make a new one.")
        program = dict(files or {})
        if code is not None:
            program[entry] = code
        self.calls.append((program, stdin))
        if callable(self.script):
            return self.script(program, stdin)
        if not self.script:
            return ExecResult("", "", 0, False, 0.0, backend=self.name)
        item = self.script[(len(self.calls) - 1) % len(self.script)]
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
