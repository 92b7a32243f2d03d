"""Servers that die with their owner: a lease folder, a watchdog process, and stale-folder reaping.

Every server the project starts (the throwaway PostgreSQL, a retrieval server process) lives in
a :class:`Lease`: a private folder under the temporary directory holding the server's files and
an owner record (``owner.json``: the owning process's pid and start time, and what to stop). A
small watchdog process, started with the lease in its own session, waits for the owner to go.
When the owner stops the lease itself (:meth:`Lease.release`) nothing is left to do; when the
owner dies any other way (SIGTERM, SIGKILL, a crash, a lost container), the watchdog signals the
recorded servers (then SIGKILL after :data:`GRACE_S`) and removes the folder, within about
:data:`POLL_S` + :data:`GRACE_S` seconds of the owner's death.

A lease also reaps at start: any folder with the same prefix whose owner is dead (its watchdog
was killed too, or the machine stopped) has its servers stopped and is removed.

This module uses only the standard library: the watchdog runs it as a script (``python -I``), so
it starts in milliseconds and imports nothing from the project.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The owner record inside a lease folder.
OWNER_FILE = "owner.json"
#: Seconds between the watchdog's checks that the owner still runs.
POLL_S = 0.2
#: Seconds a server has to exit after its stop signal before it gets SIGKILL.
GRACE_S = 5.0


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (None: no such process).

    With the pid it names one process for good: a reused pid has a later start time.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # a zombie has finished running
        return None
    return int(fields[19])


def alive(pid: int, started: int | None) -> bool:
    """Whether the process recorded as ``(pid, started)`` still runs."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


class Lease:
    """A private folder whose servers die with this process.

    Args:
        prefix: the folder name's prefix under the temporary directory (``prm-pg-``); folders of
            dead owners with this prefix are reaped first.
        parent: where to create it (default: :func:`tempfile.gettempdir`).

    Attributes:
        root: the folder (removed by :meth:`release`).
    """

    def __init__(self, prefix: str, parent: str | Path | None = None):
        self.prefix = prefix
        self.parent = Path(parent or tempfile.gettempdir())
        reap_stale(prefix, self.parent)
        self.root = Path(tempfile.mkdtemp(prefix=prefix, dir=self.parent))
        self._record: dict[str, Any] = {"pid": os.getpid(), "started": start_time(os.getpid()), "servers": []}
        self._write()
        self._released = False
        # stdin is a pipe only this process writes: the watchdog also wakes when it closes.
        self.watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, str(self.root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the owner's process group spares the watchdog
            close_fds=True,
        )

    def track(self, *, pid: int | None = None, pidfile: str | Path | None = None, group: bool = False,
              sig: int = signal.SIGTERM) -> None:  # fmt: skip
        """Record a server to stop when the owner dies: a ``pid``, or the pid on the first line of
        ``pidfile`` (read when it is needed); ``group``: signal its whole process group; ``sig``:
        its stop signal (SIGKILL follows after :data:`GRACE_S`)."""
        if (pid is None) == (pidfile is None):
            raise ValueError("track() takes exactly one of pid and pidfile")
        entry = {"pid": pid, "pidfile": str(pidfile) if pidfile else None, "group": group, "signal": int(sig)}
        if pid is not None:
            entry["started"] = start_time(pid)
        self._record["servers"].append(entry)
        self._write()

    def release(self, stop_servers: bool = True) -> None:
        """Stop the tracked servers (when ``stop_servers``), remove the folder and end the watchdog;
        idempotent. Call it after stopping the servers the polite way."""
        if self._released:
            return
        self._released = True
        if stop_servers:
            reap(self.root)
        shutil.rmtree(self.root, ignore_errors=True)
        if self.watchdog.stdin is not None:
            with contextlib.suppress(OSError):
                self.watchdog.stdin.close()  # the watchdog finds the folder gone and exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.watchdog.wait(5.0)

    def _write(self) -> None:
        tmp = self.root / f".{OWNER_FILE}.tmp"
        tmp.write_text(json.dumps(self._record))
        tmp.replace(self.root / OWNER_FILE)


def _read_owner(folder: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((folder / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _server_pids(record: dict[str, Any]) -> Iterator[tuple[int, bool, int]]:
    """``(pid, group, signal)`` of the recorded servers that still run."""
    for entry in record.get("servers", []):
        pid, started = entry.get("pid"), entry.get("started")
        if entry.get("pidfile"):
            try:
                pid, started = int(Path(entry["pidfile"]).read_text().split("\n", 1)[0]), None
            except (OSError, ValueError):
                continue
        if isinstance(pid, int) and pid > 1 and alive(pid, started):
            yield pid, bool(entry.get("group")), int(entry.get("signal", signal.SIGTERM))


def _signal(pid: int, group: bool, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def reap(folder: str | Path) -> None:
    """Stop the servers recorded in ``folder``'s owner file (their stop signal, SIGKILL after
    :data:`GRACE_S`) and remove the folder."""
    folder = Path(folder)
    record = _read_owner(folder) or {}
    targets = list(_server_pids(record))
    for pid, group, sig in targets:
        _signal(pid, group, sig)
    deadline = time.monotonic() + GRACE_S
    while any(start_time(p) is not None for p, _, _ in targets) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, group, _ in targets:
        if start_time(pid) is not None or group:
            _signal(pid, group, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)


def reap_stale(prefix: str, parent: str | Path | None = None) -> list[Path]:
    """Reap every ``<parent>/<prefix>*`` folder whose owner is dead; returns the folders removed.

    A folder without a readable owner file is left alone (it may be one being created).
    """
    removed = []
    for folder in sorted(Path(parent or tempfile.gettempdir()).glob(f"{prefix}*")):
        record = _read_owner(folder)
        if record is None or not isinstance(record.get("pid"), int):
            continue
        if not alive(record["pid"], record.get("started")):
            reap(folder)
            removed.append(folder)
    return removed


def _watch(folder: Path) -> None:
    """The watchdog: wait for the owner to die or let go, then reap what is left of ``folder``."""
    import selectors

    record = _read_owner(folder)
    if record is None:
        return
    owner, started = record["pid"], record.get("started")
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin, selectors.EVENT_READ)
    while folder.exists() and alive(owner, started):
        if sel.select(POLL_S) and not os.read(sys.stdin.fileno(), 4096):
            break  # the owner closed the pipe (release) or died
    if folder.exists():
        reap(folder)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the owner must not stop the watchdog
    _watch(Path(sys.argv[1]))
