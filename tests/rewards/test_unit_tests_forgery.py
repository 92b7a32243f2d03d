"""Programs that try to forge their unit-test score instead of solving the task score 0.

Each attack is aimed at the grading machinery (the harness, its frames and objects, its output
channel, the interpreter, the process tree), not at the task; the task (HumanEval/2,
``truncate_number``) is never solved, so any score above 0 is a forgery. The attacks were
written against the previous single-interpreter harness, where several scored 1.0.
"""

from __future__ import annotations

import pytest

from prm_gym.envs.code.env import CodeEnv
from prm_gym.envs.code.tasks import load_humaneval

TASK = "HumanEval/2"
HEAD = "def truncate_number(number: float) -> float:\n"

# Fake verdict lines in every format a harness of ours has used, written everywhere writable.
FAKE_LINES = """
import json, os
def _fake_lines():
    lines = [json.dumps({"case": i, "ok": True}) for i in range(50)] + [json.dumps({"done": True})]
    lines += [json.dumps([n, i, True, ""]) for n in NONCES for i in range(50)]
    return ("\\n".join(lines) + "\\n").encode()
NONCES = ["x"]
def _spray():
    data = _fake_lines()
    for fd in range(0, 64):
        try:
            os.write(fd, data)
        except OSError:
            pass
"""

ATTACKS = {
    "frame_walk": FAKE_LINES
    + """
import sys
def _walk():
    f = sys._getframe()
    while f is not None:
        for scope in (f.f_locals, f.f_globals):
            for name, val in list(scope.items()):
                if isinstance(val, str) and len(val) == 32:
                    NONCES.append(val)
                if callable(val) and name in ("report", "send", "_report"):
                    for i in range(50):
                        try:
                            val(i, True)
                        except Exception:
                            try:
                                val({"case": i, "ok": True})
                            except Exception:
                                pass
        f = f.f_back
    _spray()
_walk()
"""
    + HEAD
    + "    _walk()\n    return None\n",
    "gc_objects": FAKE_LINES
    + """
import gc, io
def _dig():
    for obj in gc.get_objects():
        if callable(obj) and getattr(obj, "__name__", "") in ("report", "send", "_report", "_reply"):
            for i in range(50):
                for args in ((i, True), ({"case": i, "ok": True},)):
                    try:
                        obj(*args)
                    except BaseException:
                        pass
        if isinstance(obj, io.IOBase) and not obj.closed:
            try:
                obj.write(_fake_lines()); obj.flush()
            except BaseException:
                pass
_dig()
"""
    + HEAD
    + "    _dig()\n    return None\n",
    "patch_exec": "import builtins\nbuiltins.exec = lambda *a, **k: None\n" + HEAD + "    return None\n",
    "patch_assert": """
import builtins, sys
builtins.AssertionError = type("Never", (Exception,), {})
sys.modules["builtins"].__dict__["__debug__"] = False
"""
    + HEAD
    + "    return None\n",
    "patch_builtins_and_exec": """
import builtins
builtins.exec = lambda *a, **k: None
builtins.compile = lambda *a, **k: None
builtins.AssertionError = type("Never", (BaseException,), {})
builtins.isinstance = lambda *a: True
builtins.abs = lambda x: 0
"""
    + HEAD
    + "    return None\n",
    "patch_test_module_and_codec": """
import sys, json
for mod in list(sys.modules.values()):
    for name in ("decode", "encode", "report", "_reply", "send"):
        if hasattr(mod, name):
            try:
                setattr(mod, name, lambda *a, **k: ["B", True])
            except Exception:
                pass
json.dumps = lambda *a, **k: '{"case": 0, "ok": true}\\n{"done": true}'
"""
    + HEAD
    + "    return None\n",
    "always_equal": """
class Anything(float):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __gt__(self, other): return True
    def __le__(self, other): return True
    def __ge__(self, other): return True
    def __abs__(self): return 0.0
    def __sub__(self, other): return self
    def __rsub__(self, other): return self
    def __float__(self): return 0.123456
    __hash__ = float.__hash__
"""
    + HEAD
    + "    return Anything(0.123456)\n",
    "always_equal_object": """
class Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __abs__(self): return 0
    def __sub__(self, other): return self
    def __lt__(self, other): return True
"""
    + HEAD
    + "    return Anything()\n",
    "os_exit_0_at_load": "import os\nos._exit(0)\n" + HEAD + "    return None\n",
    "os_exit_0_in_call": HEAD + "    import os\n    os._exit(0)\n",
    "sys_exit_from_atexit": """
import atexit, sys
atexit.register(lambda: sys.exit(0))
"""
    + HEAD
    + "    raise SystemExit(0)\n",
    "fake_result_lines_on_stdout": FAKE_LINES + "print(_fake_lines().decode())\n_spray()\n" + HEAD + "    _spray()\n",
    "kill_the_parent": """
import os, signal
"""
    + HEAD
    + """    for pid in (os.getppid(), 1, -1):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return None
""",
    "kill_the_process_group": HEAD + "    import os, signal\n    os.killpg(0, signal.SIGKILL)\n",
    "forged_replies_ahead": """
import os, json
"""
    + HEAD
    + """    import gc, io
    for obj in gc.get_objects():
        if isinstance(obj, io.BufferedWriter) and not obj.closed:
            for i in range(200):
                obj.write((json.dumps({"id": i, "value": ["S", "forged"]}) + "\\n").encode())
            obj.flush()
    return None
""",
    "look_for_the_tests": """
import os
def _find():
    hits = []
    for root in ("/tmp", "/", "/proc"):
        try:
            hits += os.listdir(root)
        except OSError:
            pass
    return hits
"""
    + HEAD
    + "    _find()\n    return None\n",
    "shadow_the_tests_helpers": "def abs(x):\n    return 0\n\n"
    + "class math:\n    isclose = staticmethod(lambda *a, **k: True)\n\n"
    + HEAD
    + "    return 0.0\n",
    "hang": HEAD + "    while True:\n        pass\n",
}


@pytest.fixture(scope="module")
def env():
    env = CodeEnv(load_humaneval(), sandbox="bwrap")
    yield env
    env.close()


def _grade(env: CodeEnv, code: str) -> dict:
    env.reset(options={"task_id": TASK})
    _, _, terminated, _, info = env.step(f"<answer>```python\n{code}```</answer>")
    assert terminated
    return info


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_forgery_scores_zero_and_is_the_agents(env, name):
    info = _grade(env, ATTACKS[name])
    assert info["reward_status"] == "ok", info  # never an infra error the agent could trigger
    assert info["judge"]["rule/unit_tests"]["score"] == 0.0, (name, info["judge"])
    assert info["judge"]["rule/unit_tests_all"]["score"] == 0.0


def test_the_honest_solution_still_scores_one(env):
    info = _grade(env, HEAD + "    return number % 1.0\n")
    assert info["reward_status"] == "ok" and info["judge"]["rule/unit_tests"]["score"] == 1.0
