"""A small seccomp filter that keeps a sandboxed program from making user namespaces.

A user namespace inside the sandbox would make the program root there (``unshare -r``) and
let it mount a private tmpfs past the work directory's size limit. bubblewrap's
``--disable-userns`` stops that only when bubblewrap itself makes the sandbox's user namespace,
which it does not when run by root (the program then drops to a throw-away uid instead, so that
RLIMIT_NPROC applies). This filter works either way: ``unshare`` and ``clone`` with
``CLONE_NEWUSER`` fail with ``EPERM``, ``clone3`` (whose flags a filter cannot read) fails with
``ENOSYS`` so that the C library falls back to ``clone``, and system calls of any other ABI
(32-bit or x32 entry points) fail with ``EPERM``. Everything else is allowed.

The program is a classic BPF filter assembled here (no libseccomp needed), handed to bubblewrap
with ``--seccomp FD``.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

CLONE_NEWUSER = 0x10000000

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000

#: Per machine: (audit arch, clone, unshare, clone3, has the x32 ABI).
_ARCHES: dict[str, tuple[int, int, int, int, bool]] = {
    "x86_64": (0xC000003E, 56, 272, 435, True),
    "aarch64": (0xC00000B7, 220, 97, 435, False),
}


def supported() -> bool:
    """True when a filter can be built for this machine."""
    return platform.machine() in _ARCHES


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def no_userns_filter() -> bytes:
    """The BPF program (``struct sock_filter`` array) described in the module doc.

    Raises:
        RuntimeError: the machine's system call table is not known here.
    """
    if not supported():
        raise RuntimeError(f"no seccomp filter for machine {platform.machine()!r}")
    arch, clone, unshare, clone3, x32 = _ARCHES[platform.machine()]
    deny = _insn(_RET_K, 0, 0, _ERRNO | errno.EPERM)
    enosys = _insn(_RET_K, 0, 0, _ERRNO | errno.ENOSYS)
    allow = _insn(_RET_K, 0, 0, _ALLOW)
    # Layout: [0] ld arch, [1] jeq arch, [2] ld nr, [3] x32 check, [4] clone3, [5] unshare,
    # [6] clone, [7] allow, [8] ld flags, [9] jset NEWUSER, [10] allow, [11] deny, [12] enosys.
    prog = [
        _insn(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        _insn(_JEQ_K, 0, 9, arch),  # foreign ABI -> deny
        _insn(_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        _insn(_JGE_K, 7, 0, _X32_BIT) if x32 else _insn(_JEQ_K, 7, 0, 0xFFFFFFFF),
        _insn(_JEQ_K, 7, 0, clone3),  # -> enosys
        _insn(_JEQ_K, 2, 0, unshare),  # -> ld flags
        _insn(_JEQ_K, 1, 0, clone),  # -> ld flags
        allow,
        _insn(_LD_W_ABS, 0, 0, 16),  # low 32 bits of args[0] (flags of clone and unshare)
        _insn(_JSET_K, 1, 0, CLONE_NEWUSER),  # -> deny
        allow,
        deny,
        enosys,
    ]
    return b"".join(prog)


def filter_fd() -> int:
    """A readable file descriptor (a memfd at offset 0) holding :func:`no_userns_filter`."""
    fd = os.memfd_create("prm-seccomp", os.MFD_CLOEXEC)
    os.write(fd, no_userns_filter())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
