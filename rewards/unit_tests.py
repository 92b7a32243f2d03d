"""``rule/unit_tests`` and ``rule/unit_tests_all``: run a submitted program's unit tests in the sandbox.

=========================  =======  =====  ==============================================
id                         term     scope  score
=========================  =======  =====  ==============================================
``rule/unit_tests``        outcome  final  fraction of the task's test cases that pass
``rule/unit_tests_all``    outcome  final  1.0 when every test case passes, else 0.0
=========================  =======  =====  ==============================================

The program and a small harness run in one sandbox execution. The harness silences the
program's stdout and reports each case on a private copy of it, tagged with a random nonce the
program never receives as data, so printing fake results earns nothing. (A program that digs the
nonce out of the harness's memory could still forge them; the score is a training signal, not
a security boundary.) A sandbox that fails is a :class:`prm_gym.core.errors.SandboxError`: the env
flags the turn ``infra_error`` instead of scoring it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import secrets
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prm_gym.rewards.types import Turn, Verdict
from prm_gym.sandbox.protocol import Sandbox, make_sandbox

HARNESS = """\
import json, os, sys
def _run():
    nonce = sys.stdin.readline().strip()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    spec = json.load(open("tests.json"))
    def report(i, ok, msg=""):
        out.write(json.dumps([nonce, i, ok, msg[:300]]) + "\\n")
        out.flush()
    ns = {"__name__": "__solution__"}
    try:
        exec(compile(open("solution.py").read(), "solution.py", "exec"), ns)
        exec(compile(spec["setup"], "tests_setup.py", "exec"), ns)
        ns[spec["arg"]] = ns.get(spec["entry_point"])
    except BaseException as exc:
        report(-1, False, f"{type(exc).__name__}: {exc}")
        return
    for i, case in enumerate(spec["cases"]):
        try:
            exec(compile(case, f"test_{i}.py", "exec"), ns)
            report(i, True)
        except BaseException as exc:
            report(i, False, f"{type(exc).__name__}: {exc}")
_run()
"""
_FENCE_RE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class TestReport:
    """How a program did on a task's tests."""

    passed: int
    total: int
    detail: str = ""

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def extract_code(answer: str) -> str:
    """The program in an answer: the last fenced code block, or the whole text."""
    blocks = _FENCE_RE.findall(answer)
    return (blocks[-1] if blocks else answer).strip("\n") + "\n"


def build_program(answer: str, meta: Mapping[str, Any]) -> str:
    """The program to test: the answer's code, after the task's prompt code when it is a bare completion."""
    code = extract_code(answer)
    prompt_code = str(meta.get("prompt_code", ""))
    entry = str(meta.get("entry_point", ""))
    try:
        tree = ast.parse(code)
        defines = any(isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef) and s.name == entry for s in tree.body)
    except SyntaxError:
        defines = False
    if prompt_code and not defines:
        return prompt_code + code
    if prompt_code:  # keep the prompt's imports (``from typing import List``)
        imports = [ln for ln in prompt_code.splitlines() if ln.startswith(("import ", "from "))]
        return "\n".join(imports) + "\n" + code
    return code


def run_tests(sandbox: Sandbox, program: str, meta: Mapping[str, Any], timeout_s: float) -> TestReport:
    """Run ``meta``'s test cases against ``program`` in one sandbox execution."""
    cases: Sequence[str] = meta["cases"]
    spec = {k: meta.get(k, "") for k in ("setup", "entry_point")} | {
        "arg": meta.get("arg", "candidate"),
        "cases": list(cases),
    }
    nonce = secrets.token_hex(16)
    files = {"harness.py": HARNESS, "solution.py": program, "tests.json": json.dumps(spec)}
    result = sandbox.run(files=files, entry="harness.py", stdin=nonce + "\n", timeout=timeout_s)
    ok: dict[int, bool] = {}
    detail = ""
    for line in result.stdout.splitlines():
        try:
            tag, index, passed, msg = json.loads(line)
        except (ValueError, TypeError):
            continue
        if tag != nonce or not isinstance(index, int):
            continue
        if 0 <= index < len(cases):
            ok.setdefault(index, passed is True)
        if not passed and not detail:
            detail = f"case {index}: {msg}"
    if result.timed_out:
        detail = detail or "timed out"
    return TestReport(sum(ok.values()), len(cases), detail)


_CACHE: OrderedDict[str, TestReport] = OrderedDict()
_CACHE_SIZE = 4096


class UnitTestsJudge:
    """Scores a submitted program by its task's unit tests, run in a sandbox.

    Args:
        all_pass: score 1.0/0.0 for all tests passing instead of the pass fraction.
        backend: the sandbox backend (``bwrap``, ``bwrap-pool``, ``docker``, ``process``).
        timeout_s: wall-clock limit of one test run.
        sandbox: a sandbox to use instead of making one (not closed by the judge).
    """

    term = "outcome"
    scope = "final"

    def __init__(
        self, all_pass: bool = False, backend: str = "bwrap", timeout_s: float = 10.0, sandbox: Sandbox | None = None
    ):
        self.name = "rule/unit_tests_all" if all_pass else "rule/unit_tests"
        self.all_pass = all_pass
        self.backend = backend
        self.timeout_s = timeout_s
        self._sandbox = sandbox
        self._owned = sandbox is None

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = make_sandbox(self.backend)
        return self._sandbox

    def report(self, turn: Turn) -> TestReport:
        """The test report of the turn's answer (memoised by program and tests)."""
        program = build_program(turn.answer or "", turn.task.meta)
        key = hashlib.sha256(
            json.dumps([program, dict(turn.task.meta)], sort_keys=True, default=str).encode()
        ).hexdigest()
        if key not in _CACHE:
            _CACHE[key] = run_tests(self.sandbox, program, turn.task.meta, self.timeout_s)
            if len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        return _CACHE[key]

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        out = []
        for turn in turns:
            if turn.answer is None:
                out.append(Verdict(0.0, detail="no answer"))
                continue
            rep = self.report(turn)
            value = float(rep.passed == rep.total and rep.total > 0) if self.all_pass else rep.fraction
            out.append(Verdict(value, detail=f"{rep.passed}/{rep.total} passed {rep.detail}".strip()))
        return out

    def close(self) -> None:
        if self._sandbox is not None and self._owned:
            self._sandbox.close()
        self._sandbox = None


def unit_tests_all(**kwargs: Any) -> UnitTestsJudge:
    """The all-pass variant (``rule/unit_tests_all``)."""
    return UnitTestsJudge(all_pass=True, **kwargs)
