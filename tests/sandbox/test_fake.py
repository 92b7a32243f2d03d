"""FakeSandbox satisfies the Sandbox protocol and plays its script."""

from __future__ import annotations

import pytest

from prm_gym.core.errors import SandboxError
from prm_gym.sandbox import ExecResult, Sandbox
from prm_gym.sandbox.testing import FakeSandbox


def test_fake_sandbox_scripts_results_and_failures() -> None:
    ok = ExecResult("1\n", "", 0, False, 0.01)
    with FakeSandbox([ok, SandboxError("backend killed")]) as box:
        assert isinstance(box, Sandbox)
        assert box.run("print(1)").stdout == "1\n"
        with pytest.raises(SandboxError, match="killed"):
            box.run(files={"a.py": "x"}, entry="a.py", stdin="in")
        assert box.calls == [({"main.py": "print(1)"}, ""), ({"a.py": "x"}, "in")]
    assert box.closed
    with pytest.raises(SandboxError, match="closed"):
        box.run("print(2)")


def test_fake_sandbox_with_a_function() -> None:
    box = FakeSandbox(lambda files, stdin: ExecResult(files["main.py"].upper(), "", 0, False, 0.0))
    assert box.run("abc").stdout == "ABC"
