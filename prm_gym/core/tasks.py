"""Task records, task sets, and the jsonl reader every loader uses.

A :class:`Task` is what one episode is about: a prompt, a gold answer the judges check
against, and free-form metadata (difficulty level, gold passages, unit tests, ...).
A :class:`TaskSet` is an ordered, id-addressable collection of tasks; envs pick from it with
their own ``np_random`` or pin a task with ``reset(options={"task_id": ...})``.
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn, ParamSpec, TypeVar

import numpy as np

from prm_gym.core.errors import TaskError


class ReadOnlyDict(dict[str, Any]):
    """A ``dict`` that refuses changes: the ``meta`` of a task shared between envs.

    Still a ``dict`` (``json.dumps``, ``==``, ``dict(meta)`` work as before) and it pickles and
    deep-copies; ``meta[k] = v``, ``del``, ``update`` and the other writers raise ``TypeError``.
    """

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("task meta is read-only (the task set is shared); build a new Task with dict(task.meta).")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReadOnlyDict, (dict(self),))

    def __copy__(self) -> ReadOnlyDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ReadOnlyDict:
        return self


@dataclass(frozen=True)
class Task:
    """One episode's problem.

    Attributes:
        id: unique within its task set; ``reset(options={"task_id": id})`` pins it.
        prompt: the text shown to the agent at ``reset``.
        answer: the gold answer the judges compare with (str for most envs).
        meta: anything else (difficulty ``level``, gold passages, tests, database path, ...).
    """

    id: str
    prompt: str
    answer: Any = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "answer": self.answer, "meta": dict(self.meta)}


class TaskSet:
    """An ordered collection of tasks addressed by id.

    Args:
        tasks: the tasks; ids must be unique.
        name: a label for messages (e.g. the file the tasks came from).
    """

    def __init__(self, tasks: Iterable[Task], name: str = "tasks"):
        self._tasks = list(tasks)
        self.name = name
        if not self._tasks:
            raise TaskError(f"{name}: no tasks; give a non-empty task file, list or generator.")
        self._by_id: dict[str, Task] = {}
        for t in self._tasks:
            if t.id in self._by_id:
                raise TaskError(f"{name}: duplicate task id {t.id!r}; task ids must be unique.")
            self._by_id[t.id] = t

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def __getitem__(self, index: int) -> Task:
        return self._tasks[index]

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self._tasks]

    def get(self, task_id: str) -> Task:
        """The task with this id; a :class:`TaskError` naming close ids if absent."""
        try:
            return self._by_id[str(task_id)]
        except KeyError:
            sample = ", ".join(self.ids[:5])
            raise TaskError(f"{self.name}: no task with id {task_id!r} ({len(self)} tasks, e.g. {sample}).") from None

    def sample(self, rng: np.random.Generator) -> Task:
        return self._tasks[int(rng.integers(len(self._tasks)))]

    def filter(self, keep: Callable[[Task], bool]) -> TaskSet:
        return TaskSet([t for t in self._tasks if keep(t)], name=self.name)


def json_object_line(line: str, where: str, error: type[Exception] = TaskError) -> dict[str, Any] | None:
    """The JSON object on one jsonl line (None for a blank line); ``error`` names ``where`` otherwise."""
    if not line.strip():
        return None
    try:
        rec = json.loads(line)
    except ValueError as exc:
        raise error(f"{where}: not valid JSON ({exc}).") from None
    if not isinstance(rec, dict):
        raise error(f"{where}: each line must be a JSON object.")
    return rec


def read_jsonl(
    path: str | Path, *, error: type[Exception] = TaskError, what: str = "Task file"
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` from a jsonl file; blank lines are skipped.

    Args:
        path: the file.
        error: the exception type raised for a bad file (:class:`TaskError` by default).
        what: how messages name the file ("Task file", "Corpus file").

    Raises:
        error: the file is missing, not UTF-8, or a line is not a JSON object (with its number).
    """
    p = Path(path)
    if not p.is_file():
        raise error(f"{what} {str(p)!r} does not exist (or is not a file).")
    lineno = 0
    with p.open("r", encoding="utf-8", errors="strict") as fh:
        try:
            for lineno, line in enumerate(fh, start=1):
                rec = json_object_line(line, f"{p}:{lineno}", error)
                if rec is not None:
                    yield lineno, rec
        except UnicodeDecodeError as exc:
            raise error(f"{p}: line {lineno + 1} is not UTF-8 text ({exc}).") from None


def require(rec: Mapping[str, Any], key: str, where: str) -> Any:
    """``rec[key]`` or a :class:`TaskError` naming the place and the missing field."""
    if key not in rec:
        raise TaskError(f"{where}: missing field {key!r} (fields present: {sorted(rec)[:10]}).")
    return rec[key]


def task_from_record(rec: Mapping[str, Any], where: str, default_id: str) -> Task:
    """A :class:`Task` from one record, in a file or in memory alike: a prompt (``prompt`` or
    ``question``), a gold answer (``answer``, ``answers`` or ``golden_answers``), an optional ``id``
    and an optional ``meta`` object.

    Raises:
        TaskError: naming ``where`` and the field, when the prompt is missing or ``meta`` is no object.
    """
    prompt = rec.get("prompt", rec.get("question"))
    if not isinstance(prompt, str) or not prompt.strip():
        raise TaskError(f"{where}: each task needs a non-empty 'prompt' (or 'question'); fields: {sorted(rec)[:10]}.")
    answer = rec.get("answer", rec.get("answers", rec.get("golden_answers")))
    meta = rec.get("meta", {})
    if not isinstance(meta, Mapping):
        raise TaskError(f"{where}: 'meta' must be an object.")
    return Task(str(rec.get("id", default_id)), prompt, answer, dict(meta))


def as_task_set(
    tasks: TaskSet | str | Path | Iterable[Task | Mapping[str, Any]] | None,
    load_file: Callable[[str | Path], TaskSet],
    generate: Callable[[], TaskSet],
    from_record: Callable[[Mapping[str, Any], str, str], Task] = task_from_record,
) -> TaskSet:
    """Resolve an env's ``tasks`` argument.

    ``None`` uses the env's seeded generator, a path is read with ``load_file``, and a list
    may hold :class:`Task` objects or dicts with the fields a task file's lines have: each dict
    goes through ``from_record`` (the env's own record reader, the one its files use;
    :func:`task_from_record` by default).
    """
    if tasks is None:
        return generate()
    if isinstance(tasks, TaskSet):
        return tasks
    if isinstance(tasks, str | Path):
        return load_file(tasks)
    out: list[Task] = []
    for k, t in enumerate(tasks):
        if isinstance(t, Task):
            out.append(t)
        elif isinstance(t, Mapping):
            out.append(from_record(t, f"tasks[{k}]", str(k)))
        else:
            raise TaskError(f"tasks[{k}] must be a Task or a dict, got {type(t).__name__}.")
    return TaskSet(out, name="tasks list")


P = ParamSpec("P")
R = TypeVar("R")


def _key_part(value: Any) -> Any:
    """A hashable stand-in for one generator argument (sequences as tuples, paths as strings)."""
    if isinstance(value, list | tuple):
        return tuple(_key_part(v) for v in value)
    if isinstance(value, Path):
        return str(value)
    return value  # anything else must hash (an object without value equality hashes by identity)


def frozen(task_set: TaskSet) -> TaskSet:
    """``task_set`` with every task's ``meta`` a :class:`ReadOnlyDict` (the same set if already so)."""
    if all(isinstance(t.meta, ReadOnlyDict) for t in task_set):
        return task_set
    tasks = [t if isinstance(t.meta, ReadOnlyDict) else replace(t, meta=ReadOnlyDict(t.meta)) for t in task_set]
    return TaskSet(tasks, name=task_set.name)


def generated_once(
    maxsize: int = 16, still_valid: Callable[[Any], bool] | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Memoise a seeded generator per process, keyed by its arguments (defaults filled in).

    A generator is a pure function of its arguments, so every env built with the same ones
    shares one result instead of paying the generation again (``gym.make`` then costs
    microseconds, not milliseconds). Results must not be mutated: task sets come back with
    read-only ``meta`` (:func:`frozen`). The last ``maxsize`` argument sets are kept; the
    key holds its arguments, so an argument that hashes by identity stays alive with its entry.

    Args:
        maxsize: how many distinct argument sets to keep, least recently used dropped first.
        still_valid: checked on a cached result before it is reused (e.g. its files still exist);
            False regenerates it.
    """

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        sig = inspect.signature(fn)
        cache: OrderedDict[Any, R] = OrderedDict()
        lock = threading.Lock()

        @functools.wraps(fn)
        def generate(*args: P.args, **kwargs: P.kwargs) -> R:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            key = tuple((k, _key_part(v)) for k, v in bound.arguments.items())
            with lock:
                hit = cache.get(key)
                if hit is not None and (still_valid is None or still_valid(hit)):
                    cache.move_to_end(key)
                    return hit
                out = fn(*args, **kwargs)
                if isinstance(out, TaskSet):
                    out = frozen(out)  # type: ignore[assignment]
                cache[key] = out
                if len(cache) > maxsize:
                    cache.popitem(last=False)
                return out

        generate.cache_clear = cache.clear  # type: ignore[attr-defined]
        return generate

    return wrap
