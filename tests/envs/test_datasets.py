"""Standard datasets in their own formats: every loader on fixtures the tests write in every
format (jsonl, json, parquet, a ``datasets.save_to_disk`` folder), each dataset's env scoring a
gold answer right and a wrong one wrong, and in-memory records read like file records."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import TaskError
from prm_gym.core.records import read_records, split_of
from prm_gym.core.tasks import TaskSet
from prm_gym.envs.datasets import DATASETS, load_dataset
from prm_gym.envs.search.index import BM25Index, Passage

SEARCH_R1_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you "
    "get new information. ... For example, <answer> Beijing </answer>. Question: {q}\n"
)
GSM8K = [
    {
        "question": "Tom has 3 apples and buys 1,200 more. How many apples does he have?",
        "answer": "He has 3 + 1200 = <<3+1200=1203>>1203 apples.\n#### 1,203",
    },
    {"question": "What is 2 + 6?", "answer": "2 + 6 = 8\n#### 8"},
]
MATH = [
    {
        "problem": "What is $\\frac{1}{4} + \\frac{1}{4}$?",
        "solution": "Adding gives $\\boxed{\\frac{1}{2}}$.",
        "level": "Level 2",
        "type": "Prealgebra",
    },
    {"problem": "What is $2^3$?", "solution": "$2^3 = \\boxed{8}$.", "level": "Level 1", "type": "Algebra"},
]
HOTPOTQA = [  # the Hugging Face release: supporting_facts as {title: [...], sent_id: [...]}
    {
        "id": "5a8b57f25542995d1e6f1371",
        "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
        "answer": "yes",
        "type": "comparison",
        "level": "hard",
        "supporting_facts": {"title": ["Scott Derrickson", "Ed Wood"], "sent_id": [0, 0]},
    }
]
NQ = [  # FlashRAG (Search-R1's source): id, question, golden_answers
    {"id": "test_0", "question": "who got the first nobel prize in physics", "golden_answers": ["Wilhelm Röntgen"]},
    {"id": "test_1", "question": "when is the next deadpool movie", "golden_answers": ["May 18, 2018"]},
]
SEARCH_R1 = [  # Search-R1's parquet rows (question column dropped: read from the prompt)
    {
        "data_source": "nq",
        "prompt": [{"role": "user", "content": SEARCH_R1_PROMPT.format(q="who got the first nobel prize in physics?")}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": ["Wilhelm Röntgen"]}},
        "extra_info": {"split": "test", "index": 0},
    }
]
MBPP = [
    {
        "task_id": 11,
        "text": "Write a python function to remove first and last occurrence of a given character from the string.",
        "code": "def remove_Occ(s, ch):\n    i = s.find(ch)\n    s = s[:i] + s[i + 1:] if i >= 0 else s\n"
        "    j = s.rfind(ch)\n    return s[:j] + s[j + 1:] if j >= 0 else s\n",
        "test_list": [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {  # the sanitized release: prompt instead of text, test_imports
        "source_file": "Benchmark Questions Verification V2.ipynb",
        "task_id": 3,
        "prompt": "Write a python function to identify non-prime numbers.",
        "code": "import math\ndef is_not_prime(n):\n"
        "    return n < 2 or any(n % i == 0 for i in range(2, math.isqrt(n) + 1))\n",
        "test_imports": ["import math"],
        "test_list": ["assert is_not_prime(2) == False", "assert is_not_prime(10) == True"],
    },
]
HUMANEVAL = [
    {
        "task_id": "Toy/0",
        "prompt": 'def add(a: int, b: int) -> int:\n    """Return the sum of a and b."""\n',
        "canonical_solution": "    return a + b\n",
        "test": "METADATA = {}\n\n\ndef check(candidate):\n"
        "    assert candidate(1, 2) == 3\n    assert candidate(-4, 4) == 0\n",
        "entry_point": "add",
    }
]
SPIDER = [
    {"db_id": "pets", "question": "Name the dogs.", "query": "SELECT name FROM pet WHERE kind = 'dog'"},
    {"db_id": "pets", "question": "How many pets are there?", "query": "SELECT count(*) FROM pet"},
]
BIRD = [
    {
        "question_id": 0,
        "db_id": "pets",
        "question": "Which pets are cats?",
        "evidence": "cats refers to kind = 'cat'",
        "SQL": "SELECT name FROM pet WHERE kind = 'cat'",
        "difficulty": "simple",
    }
]
RECORDS: dict[str, list[dict[str, Any]]] = {
    "gsm8k": GSM8K,
    "math": MATH,
    "hotpotqa": HOTPOTQA,
    "nq": NQ,
    "search-r1": SEARCH_R1,
    "mbpp": MBPP,
    "humaneval": HUMANEVAL,
    "spider": SPIDER,
    "bird": BIRD,
}


def write_jsonl(records: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_json(records: list[dict[str, Any]], path: Path) -> Path:
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def table(records: list[dict[str, Any]]) -> pa.Table:
    """The records as one table whose columns are every record's fields (nulls where one lacks it)."""
    fields = list(dict.fromkeys(k for r in records for k in r))
    return pa.Table.from_pylist([{k: r.get(k) for k in fields} for r in records])


def write_parquet(records: list[dict[str, Any]], path: Path) -> Path:
    pq.write_table(table(records), path)
    return path


def write_disk(records: list[dict[str, Any]], path: Path) -> Path:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset(table(records)).save_to_disk(str(path))
    return path


WRITERS: dict[str, tuple[str, Callable[[list[dict[str, Any]], Path], Path]]] = {
    "jsonl": ("data.jsonl", write_jsonl),
    "json": ("data.json", write_json),
    "parquet": ("data.parquet", write_parquet),
    "disk": ("saved", write_disk),
}


def write_sql_folder(root: Path, name: str, records: list[dict[str, Any]], fmt: str) -> Path:
    """A Spider (``dev.json`` + ``database/``) or BIRD (``dev.json`` + ``dev_databases/``) folder;
    other formats: the task file beside a ``database/`` folder."""
    dbs = root / ("dev_databases" if name == "bird" else "database") / "pets"
    dbs.mkdir(parents=True)
    conn = sqlite3.connect(dbs / "pets.sqlite")
    conn.executescript(
        "CREATE TABLE pet (name TEXT, kind TEXT); INSERT INTO pet VALUES ('Rex', 'dog'), ('Tom', 'cat'), ('Bo', 'dog');"
    )
    conn.commit()
    conn.close()
    if fmt == "json":
        write_json(records, root / "dev.json")
        return root
    file_name, writer = WRITERS[fmt]
    return writer(records, root / file_name)


def fixture_path(tmp_path: Path, name: str, fmt: str) -> Path:
    if name in ("spider", "bird"):
        return write_sql_folder(tmp_path, name, RECORDS[name], fmt)
    file_name, writer = WRITERS[fmt]
    return writer(RECORDS[name], tmp_path / file_name)


def load(name: str, path: Path) -> tuple[str, TaskSet]:
    """``load_dataset``; a SQL task file (not a Spider/BIRD folder) gets its database folder."""
    sql_file = name in ("spider", "bird") and (path.is_file() or (path / "state.json").is_file())
    extra = {"db_dir": path.parent / ("dev_databases" if name == "bird" else "database")} if sql_file else {}
    return load_dataset(name, path, **extra)


def content(tasks: TaskSet) -> list[tuple[Any, ...]]:
    """What a task holds, but where its database file lies."""
    meta = [{k: v for k, v in t.meta.items() if k != "db_path"} for t in tasks]
    return [(t.prompt, json.dumps(t.answer), json.dumps(m, sort_keys=True)) for t, m in zip(tasks, meta, strict=True)]


EXPECTED = {  # dataset -> (env, first task's gold answer)
    "gsm8k": ("prm/Math-v0", "1203"),
    "math": ("prm/Math-v0", "\\frac{1}{2}"),
    "hotpotqa": ("prm/Search-v0", ["yes"]),
    "nq": ("prm/Search-v0", ["Wilhelm Röntgen"]),
    "search-r1": ("prm/Search-v0", ["Wilhelm Röntgen"]),
    "mbpp": ("prm/Code-v0", MBPP[0]["code"]),
    "humaneval": ("prm/Code-v0", HUMANEVAL[0]["prompt"] + HUMANEVAL[0]["canonical_solution"]),
    "spider": ("prm/SQL-v0", SPIDER[0]["query"]),
    "bird": ("prm/SQL-v0", BIRD[0]["SQL"]),
}


@pytest.mark.parametrize("fmt", sorted(WRITERS))
@pytest.mark.parametrize("name", sorted(RECORDS))
def test_every_dataset_loads_the_same_tasks_from_every_format(tmp_path: Path, name: str, fmt: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    env_id, tasks = load(name, fixture_path(tmp_path / "a", name, fmt))
    _, reference = load(name, fixture_path(tmp_path / "b", name, "jsonl"))
    assert env_id == EXPECTED[name][0] == DATASETS[name].env_id
    assert len(tasks) == len(RECORDS[name]) and tasks[0].answer == EXPECTED[name][1]
    assert content(tasks) == content(reference)


def test_fields_each_dataset_defines_reach_the_task(tmp_path: Path) -> None:
    _, math = load_dataset("math", write_jsonl(MATH, tmp_path / "math.jsonl"))
    assert math[0].meta == {"level": 2, "type": "Prealgebra"}  # "Level 2" -> 2: eval groups by level
    _, hotpot = load_dataset("hotpotqa", write_parquet(HOTPOTQA, tmp_path / "h.parquet"))
    assert hotpot.ids == [HOTPOTQA[0]["id"]] and hotpot[0].meta["gold_titles"] == ["Ed Wood", "Scott Derrickson"]
    _, r1 = load_dataset("search-r1", write_parquet(SEARCH_R1, tmp_path / "r1.parquet"))
    assert r1[0].prompt == "who got the first nobel prize in physics?" and r1.ids == ["test-0"]
    _, bird = load_dataset("bird", write_sql_folder(tmp_path / "bird", "bird", BIRD, "json"))
    assert bird.ids == ["0"] and bird[0].prompt.endswith("Hint: cats refers to kind = 'cat'")
    _, mbpp = load_dataset("mbpp", write_parquet(MBPP, tmp_path / "m.parquet"))  # full + sanitized in one table
    assert mbpp[1].meta["setup"] == "import math" and mbpp[1].prompt.startswith("Write a python function to identify")


def make(env_id: str, tasks: Any) -> gym.Env:
    """``gym.make(env_id, tasks=tasks)``; Search gets a one-passage index, Code a bwrap sandbox."""
    if env_id == "prm/Search-v0":
        passage = Passage("p1", "Nobel", "Wilhelm Röntgen won the first Nobel Prize in Physics.")
        return gym.make(env_id, tasks=tasks, index=BM25Index.build([passage]))
    return gym.make(env_id, tasks=tasks, **({"sandbox": "bwrap"} if env_id == "prm/Code-v0" else {}))


GOLD_AND_WRONG: dict[str, tuple[str, str, str]] = {  # dataset -> (format, gold answer, wrong answer)
    "gsm8k": ("parquet", "1203", "1204"),
    "math": ("disk", "\\frac{1}{2}", "\\frac{1}{3}"),
    "hotpotqa": ("json", "yes", "no"),
    "nq": ("jsonl", "Wilhelm Röntgen", "Albert Einstein"),
    "search-r1": ("parquet", "Wilhelm Röntgen", "Marie Curie"),
    "mbpp": ("disk", "```python\n" + MBPP[0]["code"] + "```", "```python\ndef remove_Occ(s, ch):\n    return s\n```"),
    "humaneval": ("json", "    return a + b\n", "    return a - b\n"),
    "spider": ("json", SPIDER[0]["query"], "SELECT name FROM pet WHERE kind = 'cat'"),
    "bird": ("json", BIRD[0]["SQL"], "SELECT name FROM pet"),
}


@pytest.mark.parametrize("name", sorted(GOLD_AND_WRONG))
def test_each_dataset_is_verified_by_its_env(tmp_path: Path, name: str) -> None:
    fmt, gold, wrong = GOLD_AND_WRONG[name]
    ref = f"dataset:{name}:{fixture_path(tmp_path, name, fmt)}"
    env = make(DATASETS[name].env_id, ref)
    try:
        task_id = env.unwrapped.tasks.ids[0]  # type: ignore[attr-defined]
        outcomes = []
        for answer in (gold, wrong):
            env.reset(options={"task_id": task_id})
            _, _, terminated, _, info = env.step(f"<answer>{answer}</answer>")
            assert terminated and info["reward_status"] == "ok"
            outcomes.append(info["reward_outcome"])
        assert outcomes == [1.0, 0.0]
    finally:
        env.close()


@pytest.mark.parametrize("name", ["gsm8k", "math", "hotpotqa", "nq", "search-r1", "mbpp", "humaneval"])
def test_tasks_in_memory_take_the_same_fields_as_files(tmp_path: Path, name: str) -> None:
    env_id = DATASETS[name].env_id
    from_file = make(env_id, str(write_jsonl(RECORDS[name], tmp_path / "t.jsonl")))
    in_memory = make(env_id, RECORDS[name])
    assert content(in_memory.unwrapped.tasks) == content(from_file.unwrapped.tasks)  # type: ignore[attr-defined]


def test_sql_tasks_in_memory_take_the_same_fields_as_files(tmp_path: Path) -> None:
    folder = write_sql_folder(tmp_path, "spider", SPIDER, "json")
    in_memory = gym.make("prm/SQL-v0", tasks=SPIDER, db_dir=str(folder / "database"))
    from_file = gym.make("prm/SQL-v0", tasks=str(folder))
    assert content(in_memory.unwrapped.tasks) == content(from_file.unwrapped.tasks)  # type: ignore[attr-defined]
    with pytest.raises(TaskError, match=r"tasks\[0\]: db_id 'pets' needs the folder of databases; pass db_dir="):
        gym.make("prm/SQL-v0", tasks=SPIDER)


def test_the_humaneval_wheel_is_a_dataset_without_a_path() -> None:
    env_id, tasks = load_dataset("humaneval")
    assert env_id == "prm/Code-v0" and len(tasks) == 164 and tasks.ids[0] == "HumanEval/0"
    env = gym.make("prm/Code-v0", tasks="dataset:humaneval")
    assert len(env.unwrapped.tasks) == 164  # type: ignore[attr-defined]
    env.close()


def test_a_split_of_a_folder_follows_the_envs_split(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    parts = {"train": GSM8K[:1], "test": GSM8K[1:]}
    datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in parts.items()}).save_to_disk(
        str(tmp_path / "dd")
    )
    hub = tmp_path / "gsm8k" / "main"  # a hub snapshot's layout
    hub.mkdir(parents=True)
    for split, recs in parts.items():
        write_parquet(recs, hub / f"{split}-00000-of-00001.parquet")
    for folder in (tmp_path / "dd", tmp_path / "gsm8k"):
        train = gym.make("prm/Math-v0", tasks=f"dataset:gsm8k:{folder}")
        test = gym.make("prm/Math-v0", tasks=f"dataset:gsm8k:{folder}", split="test")
        assert [t.answer for t in train.unwrapped.tasks] == ["1203"]  # type: ignore[attr-defined]
        assert [t.answer for t in test.unwrapped.tasks] == ["8"]  # type: ignore[attr-defined]
    with pytest.raises(TaskError, match=r"no split 'validation' here; its splits are \['test', 'train'\]"):
        read_records(tmp_path / "dd", "validation")
    assert [split_of(n) for n in ("hotpot_dev_distractor_v1.json", "hotpot_train_v1.1.json", "test.parquet")] == [
        "dev",
        "train",
        "test",
    ]
    _, only_dev = load_dataset("spider", write_sql_folder(tmp_path / "sp", "spider", SPIDER, "json"), split="train")
    assert len(only_dev) == 2  # a folder with one split uses it


@pytest.mark.parametrize(
    ("name", "records", "message"),
    [
        ("gsm8k", MATH, r"not a gsm8k record: missing field 'question' \(gsm8k records have question, answer"),
        ("gsm8k", [{"question": "q", "answer": "forty-two"}], "GSM8K answers must end with '#### <number>'"),
        ("math", GSM8K, r"data\.jsonl:1: not a math record: missing field 'problem'"),
        ("mbpp", HUMANEVAL, "missing field 'test_list'"),
        ("hotpotqa", SEARCH_R1, "missing field 'question'"),
        ("nope", GSM8K, r"unknown dataset 'nope'; known: bird, gsm8k"),
    ],
)
def test_a_record_of_another_dataset_is_refused_naming_the_field(
    tmp_path: Path, name: str, records: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(TaskError, match=message):
        load_dataset(name, write_jsonl(records, tmp_path / "data.jsonl"))


def test_a_hub_folder_of_spider_parquet_files_reads_with_db_dir(tmp_path: Path) -> None:
    root = write_sql_folder(tmp_path, "spider", SPIDER, "parquet")  # database/ + data.parquet
    hub = tmp_path / "spider_hub" / "spider"
    hub.mkdir(parents=True)
    write_parquet(SPIDER[:1], hub / "train-00000-of-00001.parquet")
    write_parquet(SPIDER[1:], hub / "validation-00000-of-00001.parquet")
    _, tasks = load_dataset("spider", tmp_path / "spider_hub", split="validation", db_dir=root.parent / "database")
    assert [t.answer for t in tasks] == [SPIDER[1]["query"]]


def test_bird_sql_is_not_spider(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"not a spider record: missing field 'query'"):
        load_dataset("spider", write_sql_folder(tmp_path, "bird", BIRD, "json"))


def test_a_dataset_for_another_env_is_refused_naming_the_right_one(tmp_path: Path) -> None:
    ref = f"dataset:gsm8k:{write_jsonl(GSM8K, tmp_path / 'g.jsonl')}"
    with pytest.raises(TaskError, match=r"gsm8k tasks are played in prm/Math-v0, not prm/SQL-v0.*--env prm/Math-v0"):
        gym.make("prm/SQL-v0", tasks=ref)
    with pytest.raises(TaskError, match="needs a path: dataset:gsm8k:<file or folder>"):
        gym.make("prm/Math-v0", tasks="dataset:gsm8k")


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda p: p.write_bytes(b"not parquet"), "not a readable parquet file"),
        (lambda p: None, "does not exist"),
    ],
)
def test_unreadable_data_is_a_task_error(tmp_path: Path, write: Callable[[Path], Any], message: str) -> None:
    path = tmp_path / "x.parquet"
    write(path)
    with pytest.raises(TaskError, match=message):
        read_records(path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="no data here"):
        read_records(tmp_path / "empty")


def test_a_spider_folder_of_jsonl_files_finds_its_own_databases(tmp_path: Path) -> None:
    """A converted Spider folder (dev.jsonl beside database/, plus tables.json) reads as Spider: its
    databases are looked for inside it (not one folder up) and tables.json is not read as tasks."""
    root = write_sql_folder(tmp_path / "spider", "spider", SPIDER, "jsonl")
    (root.parent / "data.jsonl").rename(root.parent / "dev.jsonl")
    write_json([{"db_id": "pets", "table_names": ["pet"], "column_names": [[0, "name"]]}], root.parent / "tables.json")
    _, tasks = load_dataset("spider", root.parent)
    assert [t.answer for t in tasks] == [r["query"] for r in SPIDER]
    assert all(Path(t.meta["db_path"]).parent.parent == root.parent / "database" for t in tasks)
    env = gym.make("prm/SQL-v0", tasks=f"dataset:spider:{root.parent}")
    env.close()


def test_a_folder_of_data_files_leaves_tables_json_out(tmp_path: Path) -> None:
    """A folder read as data (no Spider file names) with its own database/: tables*.json are schemas."""
    folder = tmp_path / "mine"
    write_sql_folder(folder, "spider", SPIDER, "parquet")
    write_json([{"db_id": "pets", "table_names": ["pet"]}], folder / "tables.json")
    write_json([{"db_id": "pets", "table_names": ["pet"]}], folder / "test_tables.json")
    _, tasks = load_dataset("spider", folder)
    assert [t.answer for t in tasks] == [r["query"] for r in SPIDER]


def test_the_sql_env_takes_the_on_missing_its_message_suggests(tmp_path: Path) -> None:
    root = write_sql_folder(tmp_path / "spider", "spider", SPIDER, "json")
    write_json([*SPIDER, {"db_id": "gone", "question": "?", "query": "SELECT 1"}], root / "dev.json")
    with pytest.raises(TaskError, match="on_missing='skip'"):
        gym.make("prm/SQL-v0", tasks=str(root), split="dev")
    env = gym.make("prm/SQL-v0", tasks=str(root), split="dev", on_missing="skip")
    assert len(env.unwrapped.tasks) == len(SPIDER)
    env.close()
    env = gym.make("prm/SQL-v0", tasks=f"dataset:spider:{root}", split="dev", on_missing="skip")
    assert len(env.unwrapped.tasks) == len(SPIDER)
    env.close()
