"""A throwaway PostgreSQL server for the SQL env: ``initdb`` into a temporary folder, started
with ``pg_ctl`` on a unix socket in that folder, stopped and removed on :meth:`PostgresServer.stop`
(and at interpreter exit). The folder is a :class:`~prm_gym.sandbox.lifetime.Lease`: if the owning
process dies without stopping it (SIGTERM, SIGKILL, a crash), a watchdog stops the server and
removes the folder within seconds, and the next server started reaps any folder an earlier owner
left behind.

The server uses Debian's PostgreSQL binaries (``apt-get install postgresql``; ``make setup``
installs them where apt exists), found on ``PATH`` or under ``/usr/lib/postgresql/<version>/bin``,
or in the folder given as ``bin_dir``. It listens on no TCP port, only on a socket inside its
private folder, with ``trust`` authentication. PostgreSQL refuses to run as root, so under root
the server runs as the ``postgres`` system user (which Debian's package creates; ``nobody``
otherwise) through ``runuser``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from prm_gym.core.errors import ConfigError
from prm_gym.envs.sql.db import DatabaseError
from prm_gym.sandbox.lifetime import Lease

INSTALL_HINT = (
    "install them with `apt-get install postgresql` (Debian/Ubuntu; `make setup` does it where apt "
    "exists), give their folder as pg_bin_dir, or give a running server's DSN as pg_dsn"
)
#: The address space each server process may map: one query's ``string_agg`` reached 1.9 GB of
#: resident memory within a 2 s statement timeout before; past this it is the query's own
#: "out of memory" error (PostgreSQL's allocator fails the query, not the server). Per process: a
#: parallel query's workers map their own. It must exceed shared memory (``shared_buffers`` 32MB
#: here) plus the ~250 MiB a backend maps after JIT, or the server cannot start or plan.
BACKEND_MEMORY_BYTES = 1 << 30
#: Seconds ``initdb`` and ``pg_ctl start`` / ``stop`` may take.
START_TIMEOUT_S = 60.0
PORT = 5432  # names the socket file only: the server listens on no TCP port


def find_pg_bin(bin_dir: str | Path | None = None) -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``: ``bin_dir`` if given, else ``PATH``, else the
    newest ``/usr/lib/postgresql/<version>/bin``.

    Raises:
        ConfigError: no such folder holds both programs (the message says how to install them).
    """
    if bin_dir is not None:
        candidates = [Path(bin_dir)]
    else:
        on_path = shutil.which("initdb")
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version(p.parent.name))
        candidates = ([Path(on_path).resolve().parent] if on_path else []) + versions[::-1]
    for folder in candidates:
        if all(os.access(folder / prog, os.X_OK) for prog in ("initdb", "pg_ctl", "postgres")):
            return folder
    where = str(bin_dir) if bin_dir is not None else "PATH or /usr/lib/postgresql/*/bin"
    raise ConfigError(
        f"pg_bin_dir: the PostgreSQL server programs (initdb, pg_ctl) are not in {where}; {INSTALL_HINT}."
    )


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in name.split(".") if p.isdigit())


def _server_user() -> str | None:
    """The unprivileged user the server runs as under root (None when not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise ConfigError("running as root, PostgreSQL needs an unprivileged user to run as; create one named postgres.")


class PostgresServer:
    """One private PostgreSQL server, started at construction.

    Args:
        bin_dir: the folder of ``initdb`` and ``pg_ctl`` (None: found as :func:`find_pg_bin` says).

    Attributes:
        root: the private folder (data directory, socket, log), removed by :meth:`stop`.
        admin_dsn: a libpq connection string for the superuser ``postgres``.

    Raises:
        ConfigError: the binaries are missing, or root without ``runuser``.
        DatabaseError: ``initdb`` or the server failed to start (the message quotes its log).
    """

    def __init__(self, bin_dir: str | Path | None = None):
        self.bin_dir = find_pg_bin(bin_dir)
        self.user = _server_user()
        if self.user is not None and shutil.which("runuser") is None:
            raise ConfigError("running as root, starting PostgreSQL needs runuser (util-linux); install it.")
        self.lease = Lease("prm-pg-")
        self.root = self.lease.root
        self.data = self.root / "data"
        # SIGINT is PostgreSQL's fast shutdown: it ends the backends and removes the socket.
        self.lease.track(pidfile=self.data / "postmaster.pid", sig=signal.SIGINT)
        self.admin_dsn = f"host={self.root} port={PORT} dbname=postgres user=postgres"
        self._lock = threading.Lock()
        self._stopped = False
        try:
            if self.user is not None:
                shutil.chown(self.root, self.user)
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "-N")
            self._start()
        except BaseException:
            self._remove()
            raise
        atexit.register(self.stop)

    def _cmd(self, prog: str, *args: str) -> list[str]:
        cmd = [str(self.bin_dir / prog), *args]
        return ["runuser", "-u", self.user, "--", *cmd] if self.user is not None else cmd

    def _run(self, prog: str, *args: str, memory: int | None = None) -> None:
        """Run a server program; with ``memory`` (and util-linux's ``prlimit``), it and every process it
        starts (the postmaster and its backends) may map at most that many bytes each."""
        cmd = self._cmd(prog, *args)
        if memory and shutil.which("prlimit"):
            at = cmd.index(str(self.bin_dir / prog))
            cmd[at:at] = ["prlimit", f"--as={memory}", "--"]
        elif memory:
            print(
                "prm-gym: prlimit (util-linux) is not installed: the PostgreSQL server runs without a memory cap",
                file=sys.stderr,
            )
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise DatabaseError(f"PostgreSQL {prog} took more than {START_TIMEOUT_S:.0f} s.") from None
        if proc.returncode != 0:
            raise DatabaseError(f"PostgreSQL {prog} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")

    def _start(self) -> None:
        options = (
            f"-k {self.root} -p {PORT} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB"
        )
        log = self.root / "server.log"
        try:
            self._run(
                "pg_ctl",
                "-D",
                str(self.data),
                "-w",
                "-t",
                str(int(START_TIMEOUT_S)),
                "-l",
                str(log),
                "-o",
                options,
                "start",
                memory=BACKEND_MEMORY_BYTES,
            )
        except DatabaseError as exc:
            tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
            raise DatabaseError(f"{exc}\nserver log: {tail}") from None

    @property
    def pid(self) -> int | None:
        """The postmaster's process id (None once stopped)."""
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    @property
    def alive(self) -> bool:
        """True while the postmaster runs."""
        pid = self.pid
        return pid is not None and not process_gone(pid)

    def restart(self) -> None:
        """Start the server again in its folder after it died (killed, crashed): the same socket,
        data, roles and databases, so DSNs made before still work. Its orphaned backends are given
        5 s to notice and exit (then killed) and the stale lock files removed first; nothing is done
        while it runs.

        Raises:
            DatabaseError: the server was stopped with :meth:`stop`, or did not start.
        """
        with self._lock:
            if self._stopped:
                raise DatabaseError("the throwaway PostgreSQL server was stopped; make a new env.")
            if self.alive:
                return
            _end_orphans(self.data, 5.0)
            for stale in (self.data / "postmaster.pid", self.root / f".s.PGSQL.{PORT}.lock"):
                stale.unlink(missing_ok=True)
            self._start()

    def stop(self) -> None:
        """Stop the server (fast shutdown, then a kill if it lingers) and remove its folder; idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        atexit.unregister(self.stop)
        pid = self.pid
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "20", "stop")
        except DatabaseError:
            if pid is not None:
                _kill(pid)
        if pid is not None:
            _wait_gone(pid, 10.0)
        self._remove()

    def _remove(self) -> None:
        self.lease.release()

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _end_orphans(data: Path, timeout_s: float) -> None:
    """Wait for the processes of a dead postmaster (they run in its data directory) to exit; kill
    those left after ``timeout_s``."""
    where = str(data.resolve())

    def orphans() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "cwd") == where and not process_gone(int(entry.name)):
                        found.append(int(entry.name))
        return found

    deadline = time.monotonic() + timeout_s
    while (left := orphans()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        _kill(pid)
    for pid in left:
        _wait_gone(pid, 5.0)


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not process_gone(pid):
        _kill(pid)
