# mypy: ignore-errors
# The test side of the unit-test judge: runs the task's tests in their own sandbox, where the
# agent's code never runs (stdlib only). The function under test is a stand-in that sends each
# call's arguments to the host and gets back a plain value (decoded here into builtin types
# only) or an exception name, so every assertion is evaluated in this trusted interpreter.
# It reports each case, and "done" at the end, on a private copy of its stdout.
import builtins
import itertools
import json
import os

import _prm_codec as codec


class _Gone(BaseException):
    """The host stopped answering (it is finishing the run)."""


def _error(raised):
    if type(raised) is list and len(raised) == 2 and all(type(x) is str for x in raised):
        name, msg = raised
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                return cls(msg)
            except Exception:
                pass
        return RuntimeError(f"{name}: {msg}")
    return RuntimeError("malformed reply")


def _remote(name, send, replies, counter):
    def call(*args, **kwargs):
        rid = next(counter)
        send({"call": name, "id": rid, "args": codec.encode(list(args)), "kwargs": codec.encode(kwargs)})
        line = replies.readline()
        if not line:
            raise _Gone
        reply = json.loads(line)
        if type(reply) is not dict or reply.get("id") != rid:
            raise RuntimeError("a reply that answers no call")
        if "raise" in reply:
            raise _error(reply["raise"])
        if "value" not in reply:
            raise RuntimeError("malformed reply")
        return codec.decode(reply["value"])

    call.__name__ = call.__qualname__ = name
    return call


def _main():
    replies = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)

    def send(msg):
        out.write(json.dumps(msg).encode() + b"\n")
        out.flush()

    with open("tests.json", encoding="utf-8") as fh:
        spec = json.load(fh)
    counter = itertools.count()
    ns = {"__name__": "__tests__"}
    try:
        for name in spec["modules"]:
            ns[name] = __import__(name)
        exec(compile(spec["prompt_code"], "prompt.py", "exec"), ns)
        exec(compile(spec["setup"], "tests_setup.py", "exec"), ns)
    except Exception as exc:
        send({"case": -1, "ok": False, "msg": f"the tests' setup failed: {type(exc).__name__}: {exc}"[:300]})
        send({"done": True})
        return
    for name in spec["remote"]:
        ns[name] = _remote(name, send, replies, counter)
    ns[spec["arg"]] = _remote(spec["entry_point"], send, replies, counter)
    for i, case in enumerate(spec["cases"]):
        try:
            exec(compile(case, f"test_{i}.py", "exec"), ns)
            send({"case": i, "ok": True})
        except _Gone:
            return
        except BaseException as exc:
            send({"case": i, "ok": False, "msg": f"{type(exc).__name__}: {exc}"[:300]})
    send({"done": True})


_main()
