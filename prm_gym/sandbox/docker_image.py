"""A Docker image for the Docker sandbox built offline, from this machine's own Python.

Where no image registry is reachable (``docker pull python:3.11-slim`` fails), the sandbox can
run an image assembled from the host: a root file system holding one Python interpreter (the
executable, its standard library without tests and third-party packages, and every shared
library ``ldd`` says it and its extension modules load), ``/bin/sh`` and a few core utilities,
imported with ``docker import``. Build it once per daemon::

    python -m prm_gym.sandbox.docker_image             # prints the tag, e.g. prm-gym-python:3.11.2-ab12cd34

and give that tag as the sandbox's ``image`` (``gym.make("prm/Code-v0", sandbox="docker",
sandbox_kwargs={"image": tag})``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prm_gym.core.errors import PRMError, SandboxError

#: Bumped when the tree this module assembles changes (part of the tag, so stale images are rebuilt).
LAYOUT_VERSION = 1
#: Standard-library folders left out: tests, GUIs, build files and anything installed beside the stdlib.
SKIP_DIRS = frozenset(
    {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages", "dist-packages"}
)
#: Programs copied with their libraries (the sandboxed code may start a shell or sleep).
TOOLS = ("/bin/sh", "/bin/sleep", "/bin/cat", "/bin/echo", "/bin/ls")
_LDD_PATH = re.compile(r"(/\S+)\s+\(0x[0-9a-f]+\)")


def shared_libraries(binaries: Iterable[str | Path]) -> set[str]:
    """Every shared library (and the dynamic loader) the ``binaries`` load, by the paths ``ldd`` gives.

    Raises:
        SandboxError: ``ldd`` is missing.
    """
    libs: set[str] = set()
    for binary in binaries:
        try:
            out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=30).stdout
        except FileNotFoundError:
            raise SandboxError("building the sandbox image needs ldd (libc-bin); install it.") from None
        libs.update(m.group(1) for m in _LDD_PATH.finditer(out))
    return libs


def host_python() -> str:
    """The interpreter the image copies by default: the system's ``/usr/bin/python3`` (a lean
    standard library), else the running one."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def image_tag(python: str | Path | None = None) -> str:
    """The tag of the image built from ``python``: its version and a hash of its path and layout."""
    exe = Path(python or host_python()).resolve()
    version = subprocess.run(
        [str(exe), "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    digest = hashlib.sha1(f"{exe}\0{exe.stat().st_mtime_ns}\0{LAYOUT_VERSION}".encode()).hexdigest()[:8]
    return f"prm-gym-python:{version}-{digest}"


def _stdlib(python: Path) -> tuple[Path, Path]:
    """The standard-library folder and the extension-module folder of ``python``."""
    code = "import sysconfig; print(sysconfig.get_path('stdlib')); print(sysconfig.get_path('platstdlib'))"
    out = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, check=True).stdout.split()
    stdlib = Path(out[0])
    dynload = stdlib / "lib-dynload"
    return stdlib, dynload if dynload.is_dir() else Path(out[1])


def write_rootfs(tar: tarfile.TarFile, python: str | Path | None = None) -> None:
    """Add the image's tree for ``python`` (default :func:`host_python`) to ``tar`` (see the module doc)."""
    exe = Path(python or host_python()).resolve()
    stdlib, dynload = _stdlib(exe)
    modules = [p for p in dynload.rglob("*.so")] if dynload.is_dir() else []
    tools = [t for t in TOOLS if os.path.exists(t)]
    for folder in ("tmp", "work", "etc", "usr/local/bin"):
        info = tarfile.TarInfo(folder)
        info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
        tar.addfile(info)
    passwd = b"root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/sh\n"
    info = tarfile.TarInfo("etc/passwd")
    info.size, info.mode = len(passwd), 0o644
    tar.addfile(info, io.BytesIO(passwd))
    for path in sorted({str(exe), *tools, *shared_libraries([exe, *modules, *tools])}):
        tar.add(os.path.realpath(path), arcname=path.lstrip("/"), recursive=False)
    for name in ("python", "python3"):
        link = tarfile.TarInfo(f"usr/local/bin/{name}")
        link.type, link.linkname = tarfile.SYMTYPE, str(exe)
        tar.addfile(link)

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        skip = SKIP_DIRS.intersection(parts) or parts[-1].startswith("config-") or ".opt-" in parts[-1]
        return None if skip else info

    tar.add(str(stdlib), arcname=str(stdlib).lstrip("/"), filter=keep)
    if not dynload.is_relative_to(stdlib):
        tar.add(str(dynload), arcname=str(dynload).lstrip("/"), filter=keep)


def build_python_image(client: Any, python: str | Path | None = None, tag: str | None = None) -> str:
    """The tag of an image of ``python`` on the daemon of ``client`` (a docker SDK client), built
    with ``docker import`` when the daemon has none yet.

    Raises:
        SandboxError: the tree could not be assembled or the daemon refused the import.
    """
    from docker.errors import ImageNotFound  # the SDK is an optional extra; a client means it is there

    tag = tag or image_tag(python)
    try:
        client.images.get(tag)
        return tag
    except ImageNotFound:
        pass
    repo, _, version = tag.partition(":")
    with tempfile.NamedTemporaryFile(suffix=".tar") as fh:
        with tarfile.open(fileobj=fh, mode="w", dereference=True) as tar:
            write_rootfs(tar, python)
        fh.flush()
        changes = [
            "ENV PATH=/usr/local/bin:/usr/bin:/bin",
            "ENV LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib64:/usr/lib",
            "WORKDIR /work",
        ]
        try:
            client.api.import_image_from_file(fh.name, repository=repo, tag=version or "latest", changes=changes)
            client.images.get(tag)
        except Exception as exc:
            raise SandboxError(f"docker import of the sandbox image {tag} failed: {exc}") from exc
    return tag


def main(argv: list[str] | None = None) -> int:
    """``python -m prm_gym.sandbox.docker_image [--python P] [--base-url URL]``: build the image, print its tag."""
    from prm_gym.sandbox.docker import docker_client

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=None, help="the interpreter to copy (default: /usr/bin/python3, else this one)")
    ap.add_argument("--base-url", default=None, help="the daemon (default: DOCKER_HOST or the local socket)")
    args = ap.parse_args(argv)
    try:
        print(build_python_image(docker_client(args.base_url), args.python))
    except PRMError as exc:  # no SDK, no daemon, a failed build: the message says which and the fix
        print(f"docker_image: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
