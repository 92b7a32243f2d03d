"""The records every sandbox backend shares: resource :class:`Limits` in, :class:`ExecResult` out."""

from __future__ import annotations

from dataclasses import dataclass, field

from prm_gym.core.errors import ConfigError

#: Default cap on the bytes of stdout (and, separately, stderr) kept from one execution.
DEFAULT_OUTPUT_CAP = 64 * 1024


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to every execution.

    Attributes:
        timeout_s: wall-clock seconds before the whole process group is killed.
        memory_mb: address-space limit (RLIMIT_AS) in MiB.
        cpu_s: CPU seconds (RLIMIT_CPU); 0 means ``ceil(timeout_s) + 1``.
        file_size_mb: largest file a program may write (RLIMIT_FSIZE), in MiB.
        processes: most processes/threads the sandbox user may own (RLIMIT_NPROC).
        open_files: most open file descriptors (RLIMIT_NOFILE).
        tmpfs_mb: size of the private work directory (a tmpfs), in MiB.
        output_cap: bytes of stdout and of stderr kept; the rest is dropped and marked.
        total_memory_mb: memory of the whole sandbox (all its processes and its work
            directory's pages), in MiB, enforced by a cgroup where the host allows one (see
            :mod:`prm_gym.sandbox.cgroup`); 0 means ``memory_mb + tmpfs_mb``.
    """

    timeout_s: float = 10.0
    memory_mb: int = 1024
    cpu_s: int = 0
    file_size_mb: int = 16
    processes: int = 64
    open_files: int = 256
    tmpfs_mb: int = 64
    output_cap: int = DEFAULT_OUTPUT_CAP
    total_memory_mb: int = 0

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "file_size_mb", "processes", "open_files", "tmpfs_mb", "output_cap"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}.")
        if self.total_memory_mb < 0:
            raise ConfigError(
                f"Limits.total_memory_mb must be >= 0 (0 = memory_mb + tmpfs_mb), got {self.total_memory_mb}."
            )
        if self.cpu_s < 0:
            raise ConfigError(f"Limits.cpu_s must be >= 0 (0 = derived from timeout_s), got {self.cpu_s}.")

    @property
    def total_bytes(self) -> int:
        """The cap on the whole sandbox's memory, in bytes."""
        return (self.total_memory_mb or self.memory_mb + self.tmpfs_mb) * 1024 * 1024

    def rlimits(self, timeout_s: float) -> dict[str, int]:
        """The rlimits (by ``resource`` constant name) for an execution bounded by ``timeout_s``."""
        mib = 1024 * 1024
        return {
            "RLIMIT_AS": self.memory_mb * mib,
            "RLIMIT_CPU": self.cpu_s or int(timeout_s) + 2,
            "RLIMIT_FSIZE": self.file_size_mb * mib,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_CORE": 0,
        }


@dataclass(frozen=True)
class ExecResult:
    """What one execution produced.

    Attributes:
        stdout: standard output, decoded as UTF-8 (undecodable bytes replaced), capped.
        stderr: standard error, likewise.
        exit_code: the program's exit status; ``128 + n`` when killed by signal ``n``;
            ``-1`` when it was killed for running past the timeout.
        timed_out: True when the wall-clock timeout killed the program.
        duration_s: wall-clock seconds from handing over the program to its end.
        truncated: True when stdout or stderr went past the output cap.
        backend: the backend that ran it (``bwrap``, ``bwrap-pool``, ``docker``, ``process``).
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    duration_s: float
    truncated: bool = False
    backend: str = field(default="", compare=False)

    @property
    def ok(self) -> bool:
        """True when the program exited 0 within the timeout."""
        return self.exit_code == 0 and not self.timed_out
