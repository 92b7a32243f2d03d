"""The one sandbox protocol, the shared ``run`` of worker-based backends, and ``make_sandbox``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from prm_gym.core.errors import ConfigError, SandboxError
from prm_gym.sandbox._exec import Worker, frame_request
from prm_gym.sandbox.session import Session
from prm_gym.sandbox.types import ExecResult, Limits

#: The file a ``code`` string is written to and run as ``__main__``.
MAIN_FILE = "main.py"


@runtime_checkable
class Sandbox(Protocol):
    """Runs untrusted Python programs in isolation.

    ``run`` takes either ``code`` (written to ``main.py``) or ``files`` plus an ``entry``
    file, feeds ``stdin``, and returns an :class:`ExecResult`. A program that fails, crashes,
    times out or is killed for breaking a limit is a normal result; a sandbox that cannot start
    or is killed by the host raises :class:`prm_gym.core.errors.SandboxError` (an infrastructure error).
    ``close`` is idempotent; sandboxes are context managers.
    """

    name: str
    limits: Limits

    def run(
        self,
        code: str | None = None,
        *,
        files: Mapping[str, str] | None = None,
        entry: str = MAIN_FILE,
        stdin: str = "",
        timeout: float | None = None,
    ) -> ExecResult: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


def program_files(code: str | None, files: Mapping[str, str] | None, entry: str) -> dict[str, str]:
    """The files of one run; exactly one of ``code`` and ``files`` must be given."""
    if (code is None) == (files is None):
        raise ConfigError("Sandbox.run: give either code='...' or files={...} (exactly one).")
    out = {MAIN_FILE: code} if code is not None else dict(files or {})
    if code is not None and entry != MAIN_FILE:
        raise ConfigError(f"Sandbox.run: entry={entry!r} only applies with files=; code runs as {MAIN_FILE}.")
    if entry not in out:
        raise ConfigError(f"Sandbox.run: entry {entry!r} is not among the files {sorted(out)[:10]}.")
    return out


class WorkerSandbox:
    """Shared ``run``/``close`` of backends whose executions go through a :class:`Worker`.

    Subclasses implement :meth:`spawn`, which starts a fresh worker; ``run`` uses a new one
    every time, so nothing leaks from one run to the next.
    """

    name = "worker"

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self._closed = False

    def spawn(self, wait: bool = True) -> Worker:
        """A fresh worker; ``wait=False`` returns before it is ready (see :meth:`Worker.ensure_ready`)."""
        raise NotImplementedError

    def acquire(self, wait: bool = True) -> Worker:
        """A worker for the next run (the warm pool overrides this)."""
        return self.spawn(wait)

    def run(
        self,
        code: str | None = None,
        *,
        files: Mapping[str, str] | None = None,
        entry: str = MAIN_FILE,
        stdin: str = "",
        timeout: float | None = None,
    ) -> ExecResult:
        if self._closed:
            raise SandboxError(f"{self.name}: run() on a closed sandbox; make a new one.")
        prog = program_files(code, files, entry)
        timeout_s = float(timeout if timeout is not None else self.limits.timeout_s)
        if timeout_s <= 0:
            raise ConfigError(f"Sandbox.run: timeout must be > 0, got {timeout_s}.")
        request = frame_request(prog, entry, self.limits.rlimits(timeout_s))
        worker = self.acquire()
        return worker.execute(request, stdin.encode("utf-8", "surrogatepass"), timeout_s, self.limits.output_cap)

    def sessions(self, programs: Sequence[tuple[Mapping[str, str], str, float]]) -> list[Session]:
        """Start each ``(files, entry, timeout)`` in a fresh worker, all at once, and keep their pipes open.

        The workers start together (their start-up overlaps) from the calling thread, which
        must outlive them (bubblewrap's ``--die-with-parent`` follows the thread that started
        it). ``timeout`` sets the rlimits (CPU seconds); the caller enforces its own wall-clock
        deadline on each read and closes the sessions, which kills the programs.

        Raises:
            SandboxError: a worker did not start (none is left running).
        """
        if self._closed:
            raise SandboxError(f"{self.name}: sessions() on a closed sandbox; make a new one.")
        requests = []
        for files, entry, timeout in programs:
            if timeout <= 0:
                raise ConfigError(f"Sandbox.sessions: timeout must be > 0, got {timeout}.")
            requests.append(frame_request(program_files(None, files, entry), entry, self.limits.rlimits(timeout)))
        workers: list[Worker] = []
        try:
            for _ in requests:
                workers.append(self.acquire(wait=False))
            for worker in workers:
                worker.ensure_ready()
            return [Session(w, r) for w, r in zip(workers, requests, strict=True)]
        except BaseException:
            for worker in workers:
                worker.kill()
            raise

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


BACKENDS: dict[str, str] = {
    "bwrap": "prm_gym.sandbox.bwrap:BwrapSandbox",
    "bwrap-pool": "prm_gym.sandbox.pool:bwrap_pool",
    "docker": "prm_gym.sandbox.docker:DockerSandbox",
    "process": "prm_gym.sandbox.process:ProcessSandbox",
}


def make_sandbox(backend: str = "bwrap", **kwargs: Any) -> Sandbox:
    """Build a sandbox by backend name: ``bwrap``, ``bwrap-pool``, ``docker`` or ``process``.

    ``process`` runs code without isolation and must be asked for by name.

    Raises:
        ConfigError: the name is unknown.
    """
    import importlib

    if backend not in BACKENDS:
        raise ConfigError(f"Unknown sandbox backend {backend!r}; choose one of {sorted(BACKENDS)}.")
    module, attr = BACKENDS[backend].split(":")
    factory = getattr(importlib.import_module(module), attr)
    sandbox: Sandbox = factory(**kwargs)
    return sandbox
