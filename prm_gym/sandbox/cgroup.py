"""A memory cap on a whole sandbox: one cgroup per run, where the host lets us make one.

RLIMIT_AS bounds each process, but a program may fork up to ``Limits.processes`` of them; a
cgroup bounds their sum (and the pages they write to the work directory's tmpfs). Each worker
gets a fresh child cgroup of the one this process runs in, with ``memory.max`` (cgroup v2) or
``memory.limit_in_bytes`` (cgroup v1, plus the memory+swap limit where swap is accounted), and
the cgroup is removed when the worker ends. Going over the cap gets the program OOM-killed, an
ordinary result the agent sees (exit code 137), never an infrastructure error.

Where no memory cgroup can be made (no controller, a read-only cgroup file system, not
allowed to delegate), :func:`find_memory_cgroup` returns None and the sandbox states the
fallback: RLIMIT_AS per process only, so a sandbox can take up to ``processes x memory_mb``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_names = itertools.count()


@dataclass(frozen=True)
class MemoryCgroups:
    """Where per-sandbox memory cgroups are made.

    Attributes:
        version: 1 or 2.
        base: the cgroup directory this process runs in; sandboxes' cgroups go under it.
    """

    version: int
    base: Path

    def describe(self) -> str:
        knob = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        return f"cgroup v{self.version} {knob} per sandbox under {self.base}"

    def create(self, limit_bytes: int) -> Path:
        """A new cgroup capped at ``limit_bytes`` (the caller moves the sandbox into it)."""
        path = self.base / f"prm-sandbox-{os.getpid()}-{next(_names)}"
        path.mkdir()
        try:
            if self.version == 2:
                (path / "memory.max").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):
                    (path / "memory.swap.max").write_text("0")
            else:
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        except OSError:
            remove(path)
            raise
        return path

    def oom_killed(self, path: Path) -> bool:
        """True when the kernel OOM-killed a process of the cgroup at ``path`` (it went over its cap)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = (path / name).read_text()
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False


def remove(path: Path, attempts: int = 50) -> None:
    """Kill whatever is left in the cgroup at ``path`` and remove it."""
    for _ in range(attempts):
        try:
            pids = (path / "cgroup.procs").read_text().split()
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def _mounts() -> list[tuple[str, str, str]]:
    """``(mount point, fs type, super options)`` of the cgroup file systems."""
    out: list[tuple[str, str, str]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) >= 5 and len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], rfields[0], rfields[2]))
    return out


def _candidates() -> list[MemoryCgroups]:
    """Memory cgroup hierarchies of this process, v2 first."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    mounts = _mounts()
    found: list[MemoryCgroups] = []
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        rel = rel.lstrip("/")
        for point, fstype, opts in mounts:
            if controllers == "" and fstype == "cgroup2":
                base = Path(point) / rel
                with contextlib.suppress(OSError):  # delegate the memory controller to children
                    if "memory" not in (base / "cgroup.subtree_control").read_text().split():
                        (base / "cgroup.subtree_control").write_text("+memory")
                found.insert(0, MemoryCgroups(2, base))
            elif "memory" in controllers.split(",") and fstype == "cgroup" and "memory" in opts.split(","):
                found.append(MemoryCgroups(1, Path(point) / rel))
    return found


@lru_cache(maxsize=1)
def find_memory_cgroup() -> MemoryCgroups | None:
    """The first hierarchy where a capped child cgroup can really be made, or None."""
    for cand in _candidates():
        try:
            probe = cand.create(64 * 1024 * 1024)
        except OSError:
            continue
        remove(probe)
        return cand
    return None
