# mypy: ignore-errors
# The program a sandbox worker runs (as ``python -I -c <this file>``); stdlib only.
# It drops root if asked, says it is ready (one byte on stdout), waits for one framed request
# on stdin (8-byte length + JSON: files, entry point, rlimits), writes the files into the work
# directory, applies the rlimits and runs the entry point as __main__. Anything on stdin after
# the request is the program's own stdin.
import os
import sys


def _prm_boot():
    uid = os.environ.pop("PRM_SANDBOX_UID", "")
    if uid and os.getuid() == 0:
        os.setgroups([])
        os.setgid(int(uid))
        os.setuid(int(uid))
    import builtins
    import json
    import resource
    import types

    if not hasattr(builtins, "exit"):  # python -S skips site, which defines exit() and quit()
        builtins.exit = builtins.quit = sys.exit

    os.write(1, b"\x06")

    def read(n):
        buf = b""
        while len(buf) < n:
            chunk = os.read(0, n - len(buf))
            if not chunk:
                os._exit(70)
            buf += chunk
        return buf

    req = json.loads(read(int.from_bytes(read(8), "big")))
    work = os.getcwd()
    for name, text in req["files"].items():
        path = os.path.normpath(os.path.join(work, name))
        if not path.startswith(work + os.sep):
            sys.exit(f"sandbox: file name {name!r} leaves the work directory")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    for key, value in req["rlimits"].items():
        resource.setrlimit(getattr(resource, key), (value, value))
    entry = os.path.join(work, req["entry"])
    sys.argv = [req["entry"], *req.get("argv", [])]
    sys.path.insert(0, work)
    main = types.ModuleType("__main__")
    main.__file__ = entry
    sys.modules["__main__"] = main
    with open(entry, encoding="utf-8") as fh:
        source = fh.read()
    return compile(source, entry, "exec"), main.__dict__


def _prm_exit(status):
    # Finish like the interpreter would (threads, atexit, flush) but skip its slow teardown.
    if isinstance(status, SystemExit):
        status = status.code
    if status is not None and not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:  # noqa: SIM105 (no contextlib import on the hot path)
                stream.flush()
            except Exception:
                pass
        os._exit((status or 0) & 0xFF)


try:
    _prm_code, _prm_globals = _prm_boot()
    del _prm_boot
    exec(_prm_code, _prm_globals)
except SystemExit as _prm_stop:
    _prm_exit(_prm_stop)
except BaseException as _prm_exc:
    import traceback

    _prm_tb = None if isinstance(_prm_exc, SyntaxError) else _prm_exc.__traceback__.tb_next
    traceback.print_exception(type(_prm_exc), _prm_exc, _prm_tb)
    _prm_exit(1)
_prm_exit(0)
