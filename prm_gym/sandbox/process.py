"""The unsandboxed backend: a plain subprocess with rlimits and a timeout, and no isolation.

Only for trusted code or machines without bubblewrap or Docker, and only when asked for by
name (``make_sandbox("process")``). It warns loudly: the program can read and write your files
and reach the network.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

from prm_gym.sandbox._exec import BOOT_SOURCE, Worker
from prm_gym.sandbox.protocol import WorkerSandbox
from prm_gym.sandbox.types import Limits

WARNING = (
    "sandbox='process' runs untrusted code WITHOUT ISOLATION: it can read and write your files, "
    "use the network and signal your processes. Use it only for trusted code; install "
    "bubblewrap (`apt-get install bubblewrap`) for the default sandbox."
)


class UnsandboxedWarning(RuntimeWarning):
    """Code is about to run without a sandbox."""


class ProcessSandbox(WorkerSandbox):
    """Runs each program in a fresh ``python -I`` subprocess in a new temporary directory.

    Args:
        limits: rlimits and timeout (applied; isolation is not).
        python: the interpreter; default: this one.
    """

    name = "process"

    def __init__(self, limits: Limits | None = None, *, python: str | None = None):
        super().__init__(limits)
        warnings.warn(WARNING, UnsandboxedWarning, stacklevel=2)
        print(f"WARNING: {WARNING}", file=sys.stderr)
        self.python = python or sys.executable

    def spawn(self, wait: bool = True) -> Worker:
        work = tempfile.mkdtemp(prefix="prm-process-")
        env = {"PATH": os.environ.get("PATH", ""), "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8"}
        argv = [self.python, "-I", "-S", "-c", BOOT_SOURCE]
        return Worker(argv, self.name, signal_is_infra=False, env=env, cwd=work, wait=wait)
