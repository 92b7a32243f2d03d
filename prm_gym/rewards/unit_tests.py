"""``rule/unit_tests`` and ``rule/unit_tests_all``: run a submitted program's unit tests in the sandbox.

=========================  =======  =====  ==============================================
id                         term     scope  score
=========================  =======  =====  ==============================================
``rule/unit_tests``        outcome  final  fraction of the task's test cases that pass
``rule/unit_tests_all``    outcome  final  1.0 when every test case passes, else 0.0
=========================  =======  =====  ==============================================

Where the verdict is decided: the task's tests run in one sandbox, the submitted program in
another, and the host relays between them. Each call the tests make to the function under test
goes to the program's sandbox as plain arguments; the program sends back the return value in a
tagged form of builtin data (:mod:`prm_gym.rewards._codec`) or the name of the exception it
raised, and the tests' sandbox decodes it into builtin types before the assertion compares it.
Nothing the program can reach (its own interpreter, its stdout, its process tree) holds a
function, nonce or object that decides a verdict: it can only choose return values, and an
object that claims to equal everything does not survive the trip. Arguments and return values
must therefore be plain data (None, bools, numbers, strings, bytes, lists, tuples, sets, dicts);
a function that returns anything else fails that case. ``timeout_s`` bounds one task's whole
test run, as HumanEval's 3 s does. A sandbox that fails is a
:class:`prm_gym.core.errors.SandboxError`: the env flags the turn ``infra_error`` instead of
scoring it.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import re
import sys
import textwrap
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prm_gym.core.errors import ConfigError, SandboxError
from prm_gym.rewards.types import Turn, Verdict
from prm_gym.sandbox.protocol import Sandbox, make_sandbox
from prm_gym.sandbox.session import Read, Session

_HERE = Path(__file__).parent
#: The test side, the candidate side and the value codec, shipped into the sandboxes as files.
CHECK = (_HERE / "_check.py").read_text(encoding="utf-8")
SERVE = (_HERE / "_serve.py").read_text(encoding="utf-8")
CODEC = (_HERE / "_codec.py").read_text(encoding="utf-8")
#: Seconds one task's whole test run may take (HumanEval's own limit).
DEFAULT_TEST_TIMEOUT_S = 3.0
#: The longest line (one call or one return value) relayed between the sandboxes.
LINE_LIMIT = 1 << 20

_FENCE_RE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class TestReport:
    """How a program did on a task's tests."""

    passed: int
    total: int
    detail: str = ""
    timed_out: bool = False

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


UNPARSEABLE = (SyntaxError, ValueError, RecursionError, MemoryError)
"""What Python's parser raises for an agent's program: bad syntax, a NUL byte, nesting too deep for the
parser's stack (``-`` * 3000 + ``1`` is a 3 KB RecursionError; longer, a MemoryError)."""


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
    except UNPARSEABLE:  # the agent's program, scored by the tests (it fails them), never raised here
        defines = False
    if prompt_code and not defines:
        return _complete(prompt_code, code)
    if prompt_code:  # keep the prompt's imports (``from typing import List``)
        imports = [ln for ln in prompt_code.splitlines() if ln.startswith(("import ", "from "))]
        return "\n".join(imports) + "\n" + code
    return code


def _parses(src: str) -> bool:
    """True when ``src`` compiles (a full compile: ``return`` outside a function is caught)."""
    try:
        compile(src, "<answer>", "exec", dont_inherit=True)
    except UNPARSEABLE:
        return False
    return True


def _complete(prompt_code: str, body: str) -> str:
    """The prompt followed by a bare completion, re-indented when the answer lost its indentation.

    An answer's text is stripped, so an unfenced completion (``    return x``) arrives with
    its first line at column 0; it is put back at the prompt body's indentation (then, if that
    does not parse, the whole completion is dedented and re-indented) so that it grades the
    same with or without a code fence.
    """
    program = prompt_code + body
    if _parses(program) or not body.strip():
        return program
    last = next((ln for ln in reversed(prompt_code.splitlines()) if ln.strip()), "")
    indent = last[: len(last) - len(last.lstrip())] or "    "
    for attempt in (indent + body, textwrap.indent(textwrap.dedent(body), indent)):
        if _parses(prompt_code + attempt):
            return prompt_code + attempt
    return program


def trusted_prompt(prompt_code: str) -> str:
    """The prompt as the tests' sandbox runs it: its helpers and imports, the stub given a body."""
    for candidate in (prompt_code, prompt_code + "    pass\n"):
        if _parses(candidate):
            return candidate
    return "\n".join(ln for ln in prompt_code.splitlines() if ln.startswith(("import ", "from ")))


def remote_names(meta: Mapping[str, Any]) -> list[str]:
    """Names the tests use but never define: the functions the program under test must provide.

    Builtins and every name the prompt, the setup or the cases bind are left out, so a program
    can never stand in for a helper of the tests (a top-level ``abs`` of its own, say); so are
    standard-library modules (a test that calls ``math.isclose`` while only the solution imports
    ``math`` gets the real module, see :func:`module_names`).
    """
    sources = [str(meta.get("prompt_code", "")), str(meta.get("setup", "")), *map(str, meta["cases"])]
    bound: set[str] = set(dir(builtins)) | {str(meta.get("arg", "candidate"))}
    used: list[str] = []
    for src in sources:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    used.append(node.id)
                else:
                    bound.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.ExceptHandler):
                bound.add(node.name or "")
            elif isinstance(node, ast.alias):
                bound.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
    entry = str(meta.get("entry_point", ""))
    names = [n for n in dict.fromkeys(used) if n not in bound and n not in sys.stdlib_module_names]
    return [entry, *[n for n in names if n != entry]] if entry else names


def module_names(meta: Mapping[str, Any]) -> list[str]:
    """Standard-library modules the cases use without importing them (imported for the tests)."""
    used: set[str] = set()
    for src in map(str, meta["cases"]):
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        used |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return sorted(n for n in used if n in sys.stdlib_module_names and n != str(meta.get("entry_point", "")))


def run_tests(sandbox: Sandbox, program: str, meta: Mapping[str, Any], timeout_s: float) -> TestReport:
    """Run ``meta``'s test cases against ``program``: the tests and the program in two sandboxes.

    The tests run in one sandbox (never touched by the program), the program in another; the
    host relays each call's arguments and the plain value it returned between them, so every
    assertion is evaluated outside the interpreter that runs the program. ``timeout_s`` bounds
    the whole test run (HumanEval's convention), not counting the sandboxes' start.

    Raises:
        ConfigError: the sandbox cannot hold a session (Docker and fakes cannot).
        SandboxError: a sandbox failed to start, was killed by the host, or the test harness
            itself ended without a verdict.
    """
    sessions = getattr(sandbox, "sessions", None)
    if not callable(sessions):
        raise ConfigError(
            f"rule/unit_tests needs a sandbox that keeps a program's pipes open (bwrap, bwrap-pool, "
            f"process); {getattr(sandbox, 'name', type(sandbox).__name__)!r} cannot: set judge_sandbox='bwrap'."
        )
    cases: Sequence[str] = meta["cases"]
    spec = {
        "prompt_code": trusted_prompt(str(meta.get("prompt_code", ""))),
        "setup": str(meta.get("setup", "")),
        "arg": str(meta.get("arg", "candidate")),
        "entry_point": str(meta.get("entry_point", "")),
        "remote": remote_names(meta),
        "modules": module_names(meta),
        "cases": list(cases),
    }
    tests = {"check.py": CHECK, "_prm_codec.py": CODEC, "tests.json": json.dumps(spec)}
    candidate = {"serve.py": SERVE, "_prm_codec.py": CODEC, "solution.py": program}
    judge, cand = sessions([(tests, "check.py", timeout_s), (candidate, "serve.py", timeout_s)])
    with judge, cand:
        return _relay(judge, cand, len(cases), time.monotonic() + timeout_s)


def _relay(judge: Session, cand: Session, total: int, deadline: float) -> TestReport:
    """Carry calls from the tests to the program and replies back until the tests are done."""
    ok: dict[int, bool] = {}
    detail = ""
    broken = ""  # why the program can answer no more calls
    while True:
        kind, line = judge.read_line(deadline, LINE_LIMIT)
        if kind is Read.TIMEOUT:
            return TestReport(sum(ok.values()), total, detail or "timed out", True)
        if kind is not Read.LINE:
            raise SandboxError(f"the test harness ended without a verdict: {_tail(judge)}")
        msg = json.loads(line)
        if "call" in msg:
            reply, broken = _ask(cand, line, int(msg["id"]), deadline, broken)
            if reply is None or not judge.send(reply + b"\n", deadline):
                return TestReport(sum(ok.values()), total, detail or "timed out", True)
        elif "case" in msg:
            index, passed = int(msg["case"]), msg["ok"] is True
            if 0 <= index < total:
                ok.setdefault(index, passed)
            if not passed and not detail:
                detail = f"case {index}: {msg.get('msg', '')}"
        elif msg.get("done") is True:
            return TestReport(sum(ok.values()), total, detail)


def _ask(cand: Session, call: bytes, rid: int, deadline: float, broken: str) -> tuple[bytes | None, str]:
    """The program's reply line to one call (None when it ran out of time) and why it is broken."""
    if not broken:
        if not cand.send(call + b"\n", deadline):
            broken = "the program stopped reading its calls"
        else:
            kind, line = cand.read_line(deadline, LINE_LIMIT)
            if kind is Read.LINE:
                return line, broken
            if kind is Read.TIMEOUT:
                return None, broken
            broken = (
                f"the return value is over {LINE_LIMIT} bytes"
                if kind is Read.OVERFLOW
                else f"the program exited: {_tail(cand)}"
            )
    return json.dumps({"id": rid, "raise": ["RuntimeError", broken[:300]]}).encode(), broken


def _tail(session: Session) -> str:
    return bytes(session.stderr[-300:]).decode("utf-8", "replace").strip() or "no output"


_CACHE: OrderedDict[str, TestReport] = OrderedDict()
_CACHE_SIZE = 4096


class UnitTestsJudge:
    """Scores a submitted program by its task's unit tests, run in a sandbox.

    Args:
        all_pass: score 1.0/0.0 for all tests passing instead of the pass fraction.
        backend: the sandbox backend (``bwrap``, ``bwrap-pool``, ``docker``, ``process``).
        timeout_s: wall-clock limit of one task's whole test run (default 3 s, HumanEval's),
            not counting the sandboxes' start.
        sandbox: a sandbox to use instead of making one (not closed by the judge).
    """

    term = "outcome"
    scope = "final"

    def __init__(
        self,
        all_pass: bool = False,
        backend: str = "bwrap",
        timeout_s: float = DEFAULT_TEST_TIMEOUT_S,
        sandbox: Sandbox | None = None,
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

    def start(self) -> None:
        """Start the sandbox now (a warm pool starts its workers), not at the first grading."""
        _ = self.sandbox

    def report(self, turn: Turn) -> TestReport:
        """The test report of the turn's answer (memoised by program, tests and time limit)."""
        program = build_program(turn.answer or "", turn.task.meta)
        key = hashlib.sha256(
            json.dumps([program, dict(turn.task.meta), self.timeout_s], sort_keys=True, default=str).encode()
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
