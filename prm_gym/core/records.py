"""Read task records from the files and folders datasets come in.

One function, :func:`read_records`, turns any of these into ``(where, record)`` pairs, where
``where`` names the file and row for messages and ``record`` is a plain ``dict``:

* ``.jsonl`` (also ``.jsonl.gz``): one JSON object a line;
* ``.json``: a list of objects (Spider, BIRD, HotpotQA ship this);
* ``.parquet`` (Hugging Face hub files, Search-R1 / verl data) and ``.arrow``: read with pyarrow;
* a ``datasets.Dataset.save_to_disk`` folder (``state.json`` + ``*.arrow``), or a ``DatasetDict``
  one (``dataset_dict.json`` + one folder per split), read with pyarrow, no ``datasets`` needed;
* a folder of data files (a hub snapshot such as ``gsm8k/main/test-00000-of-00001.parquet``):
  the files whose name starts with the split.

Parquet and arrow need pyarrow (``pip install 'prm-gym[datasets]'``).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from prm_gym.core.errors import TaskError
from prm_gym.core.tasks import Task, TaskSet, json_object_line, read_jsonl


class Record(NamedTuple):
    """One record: ``where`` names its file and row for messages, ``key`` is its default task id
    (``line-<n>`` in a jsonl file, ``item-<k>`` elsewhere), ``data`` the record itself."""

    where: str
    key: str
    data: dict[str, Any]


DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet", ".arrow")


def read_records(path: str | Path, split: str | None = None, ignore: tuple[str, ...] = ()) -> list[Record]:
    """The records of a data file or dataset folder, in order.

    Args:
        path: a ``.jsonl``/``.jsonl.gz``/``.json``/``.parquet``/``.arrow`` file, a
            ``save_to_disk`` folder, or a folder of data files.
        split: which split of a folder with several (``train``, ``test``, ...); a folder with one
            split uses it whatever ``split`` says. Ignored for a single file.
        ignore: in a folder, the data files with these stems are not records (Spider's ``tables.json``).

    Raises:
        TaskError: the path is missing, of an unknown kind, unreadable, or a split is missing
            (the message lists the splits there are).
    """
    p = Path(path).expanduser()
    if p.is_dir():
        return _read_folder(p, split, ignore)
    if not p.is_file():
        raise TaskError(f"Task file {str(p)!r} does not exist (or is not a file).")
    name = p.name.lower()
    if name.endswith(".jsonl.gz"):
        return list(_read_jsonl_gz(p))
    if name.endswith(".json"):
        return _read_json(p)
    if name.endswith(".parquet"):
        return _rows(p, _parquet_table(p))
    if name.endswith(".arrow"):
        return _rows(p, _arrow_table([p]))
    return [Record(f"{p}:{n}", f"line-{n}", rec) for n, rec in read_jsonl(p)]


def _read_jsonl_gz(p: Path) -> Iterator[Record]:
    try:
        with gzip.open(p, "rt", encoding="utf-8") as fh:
            lines = fh.readlines()
    except (OSError, UnicodeDecodeError) as exc:  # gzip.BadGzipFile is an OSError
        raise TaskError(f"{p}: not a gzipped UTF-8 jsonl file ({exc}).") from None
    for n, line in enumerate(lines, start=1):
        rec = json_object_line(line, f"{p}:{n}")
        if rec is not None:
            yield Record(f"{p}:{n}", f"line-{n}", rec)


def _read_json(p: Path) -> list[Record]:
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TaskError(f"{p}: not valid JSON ({exc}).") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise TaskError(f"{p}: a .json task file must hold a list of objects.")
    return [Record(f"{p}[{k}]", f"item-{k}", rec) for k, rec in enumerate(data)]


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise TaskError("reading parquet or arrow data needs pyarrow: pip install 'prm-gym[datasets]'.") from None
    return pyarrow


def _parquet_table(p: Path) -> Any:
    _pyarrow()
    import pyarrow.parquet as pq

    try:
        return pq.read_table(p)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise TaskError(f"{p}: not a readable parquet file ({exc}).") from None


def _arrow_table(files: list[Path]) -> Any:
    """The rows of arrow IPC files (``save_to_disk`` writes the stream format) as one table."""
    pa = _pyarrow()
    tables = []
    for f in files:
        try:
            with pa.memory_map(str(f)) as source:
                try:
                    tables.append(pa.ipc.open_stream(source).read_all())
                except pa.ArrowInvalid:
                    source.seek(0)
                    tables.append(pa.ipc.open_file(source).read_all())
        except (OSError, pa.ArrowInvalid) as exc:
            raise TaskError(f"{f}: not a readable arrow file ({exc}).") from None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _rows(where: Path, table: Any) -> list[Record]:
    """The table's rows; a null cell counts as an absent field (a column holds nulls where the
    rows written together did not all have that field, e.g. MBPP's full and sanitized records)."""
    rows = table.to_pylist()
    return [
        Record(f"{where}[{k}]", f"item-{k}", {f: v for f, v in rec.items() if v is not None})
        for k, rec in enumerate(rows)
    ]


def _pick_split(folder: Path, splits: list[str], split: str | None) -> str:
    if len(splits) == 1:
        return splits[0]
    if split in splits:
        return split
    raise TaskError(f"{folder}: no split {split!r} here; its splits are {sorted(splits)}; pass split=<one of them>.")


_SPLIT_WORDS = ("train", "validation", "dev", "test")


def split_of(file_name: str) -> str:
    """The split a data file's name says: the first of ``train``/``validation``/``dev``/``test``
    among the words of the name (``test-00000-of-00001.parquet``, ``hotpot_dev_distractor_v1.json``,
    ``train_spider.json``), else its first word."""
    words = [w for w in re.split(r"[-_.]", file_name.lower()) if w]
    return next((w for w in words if w in _SPLIT_WORDS), words[0] if words else file_name)


def _read_folder(folder: Path, split: str | None, ignore: tuple[str, ...] = ()) -> list[Record]:
    if (folder / "dataset_dict.json").is_file():  # DatasetDict.save_to_disk
        try:
            splits = [str(s) for s in json.loads((folder / "dataset_dict.json").read_text())["splits"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise TaskError(f"{folder}/dataset_dict.json: unreadable ({exc}).") from None
        return _read_folder(folder / _pick_split(folder, splits, split), None)
    if (folder / "state.json").is_file():  # Dataset.save_to_disk
        try:
            state = json.loads((folder / "state.json").read_text())
            files = [folder / str(f["filename"]) for f in state["_data_files"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise TaskError(f"{folder}/state.json: unreadable ({exc}).") from None
        return _rows(folder, _arrow_table(files))
    data = sorted(
        f
        for f in folder.rglob("*")
        if f.is_file() and f.name.lower().endswith(DATA_SUFFIXES) and f.name.split(".")[0] not in ignore
    )
    if not data:
        raise TaskError(
            f"{folder}: no data here; give a .jsonl, .json, .parquet or .arrow file, a datasets "
            "save_to_disk folder, or a folder holding such files."
        )
    by_split: dict[str, list[Path]] = {}
    for f in data:
        by_split.setdefault(split_of(f.name), []).append(f)
    chosen = by_split[_pick_split(folder, sorted(by_split), split)]
    return [rec for f in chosen for rec in read_records(f)]


def load_task_set(
    path: str | Path, from_record: Callable[[Mapping[str, Any], str, str], Task], split: str | None = None
) -> TaskSet:
    """A :class:`TaskSet` of every record of ``path`` (:func:`read_records`), each read by
    ``from_record(record, where, default_id)``: an env's own record reader, the one it uses for
    tasks given in memory too."""
    return TaskSet([from_record(r.data, r.where, r.key) for r in read_records(path, split)], name=str(path))
