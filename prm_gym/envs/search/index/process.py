"""A retrieval server in its own process(es), started from Python and tied to this process's life.

:class:`RetrievalProcess` runs ``python -m prm_gym.envs.search.index.server`` (with ``--workers``
processes on one port, for more cores than one GIL gives) and waits until it answers ``/health``::

    from prm_gym.envs.search.index.process import RetrievalProcess

    with RetrievalProcess("runs/index", workers=4) as server:
        env = gym.make("prm/Search-v0", index=server.url)

Its log and owner record live in a :class:`~prm_gym.sandbox.lifetime.Lease` folder
(``/tmp/prm-retrieval-*``): when this process dies without stopping it, the server and its
workers are stopped and the folder removed within seconds, and the next start reaps leftovers.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prm_gym.core.errors import InfraError
from prm_gym.sandbox.lifetime import Lease

#: Seconds the server may take to load its index and answer ``/health``.
START_TIMEOUT_S = 120.0
_SERVING = re.compile(r"serving \S+ on (http://\S+)/retrieve")


class RetrievalProcess:
    """A retrieval server process (and its workers) that dies with its owner.

    Args:
        source: an index folder, or with ``corpus=True`` a jsonl corpus indexed at start-up.
        backend: ``bm25``, ``dense`` or ``pyserini``.
        workers: processes serving the port (bm25 only).
        corpus: ``source`` is a corpus file rather than an index folder.
        port: the port (0: a free one; see :attr:`url`).
        timeout_s: how long to wait for the server to answer.

    Raises:
        InfraError: the server exited or did not answer within ``timeout_s`` (the message quotes its log).
    """

    def __init__(
        self,
        source: str | Path,
        *,
        backend: str = "bm25",
        workers: int = 1,
        corpus: bool = False,
        port: int = 0,
        timeout_s: float = START_TIMEOUT_S,
    ):
        self.lease = Lease("prm-retrieval-")
        self.log = self.lease.root / "server.log"
        argv = [sys.executable, "-m", "prm_gym.envs.search.index.server", "--corpus" if corpus else "--index"]
        argv += [str(source), "--backend", backend, "--workers", str(workers), "--port", str(port)]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        # the server's own process group holds its forked workers: the watchdog stops them all
        self.lease.track(pid=self.proc.pid, group=True, sig=signal.SIGTERM)
        try:
            self.url = self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise InfraError(f"the retrieval server exited ({self.proc.returncode}): {self._log_tail()}")
            found = _SERVING.search(self.log.read_text(errors="replace"))
            if found and _healthy(found.group(1)):
                return found.group(1)
            time.sleep(0.1)
        raise InfraError(f"the retrieval server did not answer within {timeout_s:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        """The server's main process id."""
        return self.proc.pid

    def stop(self) -> None:
        """Stop the server and its workers (SIGTERM, SIGKILL after a grace period) and remove its folder;
        idempotent."""
        self.lease.release()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> RetrievalProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2.0) as reply:
            return bool(json.load(reply).get("status") == "ok")
    except (OSError, ValueError):
        return False
