"""The default backend: bubblewrap (``bwrap``) around a fresh Python interpreter.

Each run gets new namespaces (no network, private PIDs, IPC and hostname), a read-only view of
the root file system with the home directories, the project and the host's temporary
directories hidden, a private tmpfs work directory (``/tmp``), rlimits (address space, CPU,
file size, processes, open files) and a wall-clock timeout after which the whole process group
is killed. Run by root, the program additionally drops to a throw-away uid, so RLIMIT_NPROC
applies (root is exempt from it) and it owns nothing on the host.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from prm_gym.core.errors import SandboxError
from prm_gym.sandbox._exec import BOOT_SOURCE, Worker
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


def find_bwrap() -> str:
    """The path of the ``bwrap`` binary.

    Raises:
        SandboxError: bubblewrap is missing; the message says how to install it.
    """
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError(INSTALL_HINT)
    return path


def default_hidden() -> list[str]:
    """Directories replaced by empty tmpfs mounts: homes, the project, the host's temp dirs."""
    project = Path(__file__).resolve().parents[1]
    paths = ["/root", "/home", str(Path.home()), str(project), os.getcwd(), "/tmp", "/var/tmp", "/run", "/mnt"]
    return [p for p in dict.fromkeys(paths) if p != "/" and os.path.isdir(p)]


class BwrapSandbox(WorkerSandbox):
    """Runs each program in a fresh bubblewrap sandbox (a cold start every run).

    Args:
        limits: resource limits.
        python: the interpreter inside the sandbox; default: this interpreter's base install
            (a virtualenv's packages are not visible inside).
        hide: directories to hide behind empty tmpfs mounts; default :func:`default_hidden`.
        ro_binds: extra host paths made visible read-only at the same place.
        bwrap: the bwrap binary; default: found on PATH.
        site: import ``site`` at start (site-packages of ``python`` visible, ~25 ms slower).
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
    ):
        super().__init__(limits)
        self.bwrap = bwrap or find_bwrap()
        self.python = python or os.path.realpath(sys.executable)
        self.flags = ["-I"] if site else ["-I", "-S"]
        self.hide = list(default_hidden() if hide is None else hide)
        prefix = os.path.realpath(sys.base_prefix) if python is None else os.path.dirname(os.path.dirname(self.python))
        self.ro_binds = [p for p in dict.fromkeys([prefix, *ro_binds]) if os.path.exists(p)]

    def command(self, uid: int | None) -> list[str]:
        """The bwrap command line; ``uid`` is the uid to drop to when run by root."""
        cmd = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for path in self.hide:
            cmd += ["--tmpfs", path]
        for path in self.ro_binds:
            for parent in reversed(Path(path).parents):  # tmpfs-made parents must be traversable
                if any(parent.is_relative_to(h) and str(parent) != h for h in self.hide):
                    cmd += ["--perms", "0755", "--dir", str(parent)]
            cmd += ["--ro-bind", path, path]
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
        return [*cmd, "--", self.python, *self.flags, "-c", BOOT_SOURCE]

    def spawn(self) -> Worker:
        uid = _UID_BASE + next(_uids) % 1_000_000 if os.geteuid() == 0 else None
        return Worker(self.command(uid), self.name, signal_is_infra=True, env={"PATH": os.environ.get("PATH", "")})
