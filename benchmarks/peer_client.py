"""Drive ``peer_worker.py`` in a peer's own Python one pass at a time (see that module's protocol).

``bench_envs.py`` alternates its own timed passes with the peer's, so a load spike on the shared
machine hits both sides instead of whichever happened to run during it::

    session = PeerSession(python, job_path, cwd=tmp)
    if not session.error:
        times = [session.ask("pass") for _ in range(reps)]
        rewards = session.ask("end")["rewards"]
    session.close()

Every failure (no interpreter, a crash, a hang past ``timeout_s``, a peer without this env) ends up
in ``session.error`` and in the reply of :meth:`PeerSession.ask`, never as an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parent / "peer_worker.py"
#: Where ``make bench-peers`` installs each peer suite: ``.venv-peers/<peer>``.
PEERS_DIR = WORKER.parent.parent / ".venv-peers"


def peer_python(peer: str, override: str = "") -> Path:
    """The peer's interpreter: ``override``, ``$<PEER>_PYTHON``, else ``.venv-peers/<peer>/bin/python``."""
    given = override or os.environ.get(f"{peer.upper()}_PYTHON", "")
    return Path(given).absolute() if given else PEERS_DIR / peer / "bin" / "python"


def not_installed(python: Path) -> str:
    """Why a peer's rows are skipped when its interpreter is missing."""
    return f"not installed ({python} not found): run `make bench-peers`"


class PeerSession:
    """One running ``peer_worker.py``.

    Args:
        python: the peer's interpreter.
        job: the job file (``peer``, ``kind``, ``db_root``, ``cases``).
        cwd: working directory of the worker (its stderr goes to ``<cwd>/<job stem>.stderr``).
        timeout_s: the worker is killed after this many seconds in all.
    """

    def __init__(self, python: str, job: Path, cwd: Path, timeout_s: float = 900.0):
        self.error = ""
        self.hello: dict[str, Any] = {}
        self._stderr = cwd / f"{job.stem}.stderr"
        try:
            with self._stderr.open("w") as err:
                self._proc: subprocess.Popen[str] | None = subprocess.Popen(
                    [python, str(WORKER), str(job)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    cwd=cwd,
                    start_new_session=True,  # its own process group: a kill reaches its children too
                )
        except OSError as exc:
            self._proc, self.error = None, f"{type(exc).__name__}: {exc}"[:300]
            return
        self._watchdog = threading.Timer(timeout_s, self._kill)
        self._watchdog.daemon = True
        self._watchdog.start()
        self.hello = self._read()
        self.error = str(self.hello.get("error", ""))

    def ask(self, command: str) -> dict[str, Any]:
        """Send ``pass`` or ``end``; the worker's JSON reply (``{"error": ...}`` once anything failed)."""
        if self.error or self._proc is None or self._proc.stdin is None:
            return {"error": self.error or "the worker is not running"}
        try:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
        except OSError as exc:
            self.error = f"the worker stopped: {type(exc).__name__}: {exc}"[:300]
            return {"error": self.error}
        reply = self._read()
        self.error = str(reply.get("error", ""))
        return reply

    def close(self) -> None:
        """Stop the worker (idempotent)."""
        if self._proc is None:
            return
        self._watchdog.cancel()
        self._kill()
        self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe is not None:
                pipe.close()
        self._proc = None

    def _kill(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def _read(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        for line in iter(self._proc.stdout.readline, ""):
            if line.startswith("{"):
                reply: dict[str, Any] = json.loads(line)
                return reply
        code = self._proc.wait()
        lines = self._stderr.read_text(errors="replace").strip().splitlines() or ["no output"]
        return {"error": f"worker exit {code}: {lines[-1][:200]}"}
