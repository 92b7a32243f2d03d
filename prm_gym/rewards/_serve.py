# mypy: ignore-errors
# The candidate side of the unit-test judge: runs in a sandbox beside the agent's program
# (solution.py), stdlib only. It loads the program, then answers call requests, one JSON line
# each on stdin, with the tagged return value (or the exception's name) on its own stdout. It
# decides nothing: whatever it (or the agent's code, which can reach everything here) writes
# is only ever taken as the value the function returned.
import json
import os

import _prm_codec as codec


def _reply(ns, load_error, line):
    try:
        req = json.loads(line)
        rid = req["id"]
    except Exception:
        return {"id": None, "raise": ["ValueError", "malformed request"]}
    if load_error is not None:
        return {"id": rid, "raise": load_error}
    try:
        fn = ns.get(req["call"])
        if fn is None:
            raise NameError(f"name {req['call']!r} is not defined by the program")
        value = fn(*codec.decode(req["args"]), **codec.decode(req["kwargs"]))
        return {"id": rid, "value": codec.encode(value)}
    except BaseException as exc:
        return {"id": rid, "raise": [type(exc).__name__, str(exc)[:300]]}


def _main():
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    ns = {"__name__": "__solution__"}
    load_error = None
    try:
        with open("solution.py", encoding="utf-8") as fh:
            source = fh.read()
        exec(compile(source, "solution.py", "exec"), ns)
    except BaseException as exc:
        load_error = [type(exc).__name__, f"the program failed to load: {type(exc).__name__}: {exc}"[:300]]
    for line in requests:
        replies.write(json.dumps(_reply(ns, load_error, line)).encode() + b"\n")
        replies.flush()


_main()
