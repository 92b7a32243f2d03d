"""A real ``prm-serve`` subprocess for the load benchmark, and what ``/proc`` says of it over time.

:class:`Server` starts it on a free loopback port with a token and stops it with every process it
started; :class:`Sampler` reads its RSS, fds, threads, its descendants' memory (PSS) and fds, and the
sessions ``/health`` reports, every few seconds. Used by ``bench_serve_load.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from prm_gym.agents.vllm_server import free_port
from prm_gym.envs.serve.auth import TOKEN_ENV


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (read from /proc)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # ended meanwhile
        return 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class Server:
    """A ``prm-serve`` subprocess on a free loopback port, with a token; ``stop()`` ends it and its processes."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], max_sessions: int, call_timeout_s: float, log: Path):
        self.port, self.token, self.log = free_port(), secrets.token_urlsafe(32), log
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [
            sys.executable, "-m", "prm_gym.envs.serve.cli", "--env", env_id, "--host", "127.0.0.1",
            "--port", str(self.port), "--max-sessions", str(max_sessions), "--env-kwargs", json.dumps(env_kwargs),
            "--call-timeout-s", f"{call_timeout_s:g}", "--idle-timeout-s", "600",
        ]  # fmt: skip
        env = {**os.environ, TOKEN_ENV: self.token}  # the token through the environment, not argv (ps)
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.pid = self.proc.pid
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            if self.proc.poll() is not None:
                raise RuntimeError(f"prm-serve exited with {self.proc.returncode}: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("prm-serve did not answer /health within 120 s")

    def health(self) -> dict[str, Any]:
        try:
            return dict(httpx.get(f"{self.url}/health", timeout=5).json())
        except (httpx.HTTPError, ValueError):
            return {}

    def stop(self) -> dict[str, Any]:
        """SIGTERM (the server closes every session), SIGKILL of the whole tree past 30 s; then
        checks that the server and every process it had started are gone."""
        kids = descendants(self.pid) if self.proc.poll() is None else []
        t0 = time.monotonic()
        how = "SIGTERM"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                how = "SIGKILL (did not stop within 30 s of SIGTERM)"
                for pid in [self.pid, *kids]:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                self.proc.wait(10)
        stopped_s = time.monotonic() - t0
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in kids) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [p for p in kids if _alive(p)]
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return {
            "how": how,
            "exit_code": self.proc.returncode,
            "stop_s": round(stopped_s, 2),
            "processes_at_stop": len(kids),
            "left_behind": left,
            "gone": self.proc.poll() is not None and not left,
        }


class Sampler:
    """Reads the server's RSS, fds, threads, descendants and sessions every ``every_s`` seconds."""

    def __init__(self, server: Server, every_s: float, t0: float):
        self.server, self.every_s, self.t0 = server, every_s, t0
        self.phase = "warmup"
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-sampler", daemon=True)
        self._thread.start()

    def sample(self, mark: str = "") -> dict[str, Any]:
        pid = self.server.pid
        kids = descendants(pid)
        row = {
            "t_s": round(time.monotonic() - self.t0, 2),
            "phase": self.phase,
            "rss_mib": round(_status_kib(pid, "VmRSS") / 1024, 1),
            "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": _status_kib(pid, "Threads"),
            "processes": len(kids),
            "processes_pss_mib": round(sum(_pss_kib(p) for p in kids) / 1024, 1),
            "processes_fds": sum(_fds(p) for p in kids),
            "sessions": self.server.health().get("sessions"),
        }
        if mark:
            row["mark"] = mark
        self.samples.append(row)
        return row

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            with contextlib.suppress(OSError, ValueError):
                self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
