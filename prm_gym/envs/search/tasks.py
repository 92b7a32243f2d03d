"""Search tasks: a seeded fictional world rendered into a passage corpus, its questions, and
loaders for NQ / HotpotQA-style QA files.

The world has countries, cities, companies and people with attributes (years, rivers,
professions) and relations (born in, works for, founded by, headquartered in, capital of).
All names are invented from syllables, so no model can know an answer without retrieving it.
Each entity becomes one passage; each question records the ids of the passages that prove
its answer (``meta["gold_ids"]``), so the retrieval reward can measure recall.

Question kinds: single-hop (one passage) and multi-hop (2 or 3 passages chained through a
bridge entity, as in HotpotQA / Tree-GRPO's multi-hop QA).

Splits: by default each split is its own seeded draw from the same finite question space (300
people, eight question shapes), so splits share questions: 70 of the first 100 test questions occur
word for word among 2,000 training ones (86 of 100 multi-hop ones). ``disjoint=True`` gives each
person and company to one split (:func:`split_of`: 80% train, 10% validation, 10% test), and a
split's questions name only its own people and companies, so no test question's subject (the one
entity it names) is named by a training question. Later hops are not split: a test person's
employer, its founder, a city or a country may be the subject or the answer of training questions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prm_gym.core.errors import TaskError
from prm_gym.core.progress import track
from prm_gym.core.records import load_task_set
from prm_gym.core.tasks import ReadOnlyDict, Task, TaskSet, generated_once
from prm_gym.envs.search.index.protocol import Passage

_SYL = [
    "ka",
    "ve",
    "lo",
    "ri",
    "mu",
    "sa",
    "to",
    "ne",
    "zi",
    "fa",
    "do",
    "ba",
    "qu",
    "el",
    "an",
    "or",
    "ist",
    "ul",
    "yr",
    "th",
    "ar",
    "en",
    "ol",
    "ix",
    "mar",
    "tel",
    "vin",
    "cor",
    "dal",
    "rus",
    "hel",
    "kem",
    "lor",
    "nap",
    "sor",
    "tav",
    "wyn",
    "zed",
    "bri",
    "gal",
]
_RIVERS = ["Ossel", "Varn", "Tibra", "Quell", "Mirran", "Sable", "Harth", "Lunet", "Corva", "Estril", "Pellan", "Duvra"]
_JOBS = [
    "botanist",
    "cartographer",
    "engineer",
    "violinist",
    "surgeon",
    "chemist",
    "sculptor",
    "archivist",
    "pilot",
    "judge",
]
_INDUSTRIES = ["shipbuilding", "textiles", "glassware", "robotics", "publishing", "mining", "tea", "optics"]
_SPLITS = {"train": 0, "test": 1, "validation": 2}


def split_of(entity_id: str) -> str:
    """The split whose questions may name this person or company under disjoint splits: a fixed
    hash of its id, 8 in 10 ``train``, 1 in 10 ``validation`` and ``test``."""
    bucket = int.from_bytes(hashlib.blake2b(f"prm-search:{entity_id}".encode(), digest_size=8).digest(), "big") % 10
    return {8: "validation", 9: "test"}.get(bucket, "train")


@dataclass(frozen=True, eq=False)
class World:
    """Entities by kind; each entity is a read-only dict of attributes with ``id`` and ``name``.

    Immutable (tuples of :class:`ReadOnlyDict`), because :func:`generate_world` shares one
    world per argument set across the process; it hashes by identity.
    """

    countries: tuple[Mapping[str, Any], ...] = ()
    cities: tuple[Mapping[str, Any], ...] = ()
    companies: tuple[Mapping[str, Any], ...] = ()
    people: tuple[Mapping[str, Any], ...] = ()


@dataclass
class _Draft:
    """A world under construction (entities still filled in)."""

    countries: list[dict[str, Any]] = field(default_factory=list)
    cities: list[dict[str, Any]] = field(default_factory=list)
    companies: list[dict[str, Any]] = field(default_factory=list)
    people: list[dict[str, Any]] = field(default_factory=list)


def _namer(rng: np.random.Generator) -> Callable[[int], str]:
    used: set[str] = set()

    pools: dict[int, list[str]] = {}
    bump: dict[int, int] = {}

    def name(syllables: int) -> str:
        misses = 0
        while True:
            n = syllables + bump.get(syllables, 0)
            pool = pools.setdefault(n, [])
            if not pool:  # refill with a batch of fresh candidates
                draws = rng.integers(len(_SYL), size=(4096, n)).tolist()
                pool.extend("".join(_SYL[i] for i in row).capitalize() for row in draws)
            word = pool.pop()
            if word not in used and len(word) > 3:
                used.add(word)
                return word
            misses += 1
            if misses >= 8:  # names this short are running out: use longer ones
                bump[syllables], misses = bump.get(syllables, 0) + 1, 0

    return name


@generated_once()
def generate_world(n_people: int = 300, seed: int = 0) -> World:
    """A world with ``n_people`` people and proportionally many companies, cities, countries.

    Generated once per process for each ``(n_people, seed)`` and shared (the world is immutable).
    """
    if n_people < 4:
        raise TaskError(f"n_people must be >= 4, got {n_people}.")
    rng = np.random.default_rng([seed, 7])
    name = _namer(rng)
    w = _Draft()
    for i in range(max(3, n_people // 40)):
        w.countries.append({"id": f"country-{i}", "name": f"{name(3)}ia", "currency": name(2).lower()})
    for i in range(max(6, n_people // 10)):
        country = w.countries[int(rng.integers(len(w.countries)))]
        w.cities.append(
            {
                "id": f"city-{i}",
                "name": name(3),
                "country": country["name"],
                "river": _RIVERS[int(rng.integers(len(_RIVERS)))],
                "founded": int(rng.integers(800, 1900)),
            }
        )
    for c in w.countries:
        home = [x for x in w.cities if x["country"] == c["name"]] or w.cities
        c["capital"] = home[int(rng.integers(len(home)))]["name"]
    first, last = [name(2) for _ in range(max(8, n_people // 8))], [name(3) for _ in range(n_people)]
    for i in range(n_people):
        city = w.cities[int(rng.integers(len(w.cities)))]
        w.people.append(
            {
                "id": f"person-{i}",
                "name": f"{first[int(rng.integers(len(first)))]} {last[i]}",
                "born_in": city["name"],
                "born": int(rng.integers(1900, 2001)),
                "job": _JOBS[int(rng.integers(len(_JOBS)))],
            }
        )
    for i in range(max(4, n_people // 5)):
        founder = w.people[int(rng.integers(n_people))]
        w.companies.append(
            {
                "id": f"company-{i}",
                "name": f"{name(2)} {_INDUSTRIES[i % len(_INDUSTRIES)].capitalize()}",
                "hq": w.cities[int(rng.integers(len(w.cities)))]["name"],
                "founded": int(rng.integers(1850, 2020)),
                "founder": founder["name"],
            }
        )
    for p in w.people:
        p["employer"] = w.companies[int(rng.integers(len(w.companies)))]["name"]
    return World(*(tuple(ReadOnlyDict(e) for e in kind) for kind in (w.countries, w.cities, w.companies, w.people)))


def world_passages(w: World) -> list[Passage]:
    """One passage per entity, ids equal to the entity ids."""
    out = [
        Passage(
            c["id"],
            c["name"],
            f"{c['name']} is a country. Its capital city is {c['capital']}, and its currency is the {c['currency']}.",
        )
        for c in w.countries
    ]
    out += [
        Passage(
            c["id"],
            c["name"],
            f"{c['name']} is a city in {c['country']}. It was founded in "
            f"{c['founded']} on the banks of the river {c['river']}.",
        )
        for c in w.cities
    ]
    out += [
        Passage(
            c["id"],
            c["name"],
            f"{c['name']} is a {c['name'].split()[-1].lower()} company founded in "
            f"{c['founded']} by {c['founder']}. Its headquarters are in {c['hq']}.",
        )
        for c in w.companies
    ]
    out += [
        Passage(
            p["id"],
            p["name"],
            f"{p['name']} (born {p['born']}) is a {p['job']} who was born in "
            f"{p['born_in']}. {p['name'].split()[-1]} works for {p['employer']}.",
        )
        for p in w.people
    ]
    return out


def _by_name(w: World) -> dict[str, Mapping[str, Any]]:
    return {e["name"]: e for kind in (w.countries, w.cities, w.companies, w.people) for e in kind}


_KINDS = {"all": (0, 8), "single": (0, 4), "multi": (4, 8)}
"""Question kinds of the generator: its question shapes 0-3 are single-hop, 4-7 multi-hop."""


def _question(
    w: World,
    names: dict[str, Mapping[str, Any]],
    rng: np.random.Generator,
    kinds: str = "all",
    only: tuple[tuple[Mapping[str, Any], ...], tuple[Mapping[str, Any], ...]] | None = None,
) -> tuple[str, str, list[str], str]:
    """(question, answer, gold passage ids, kind) for one random question of ``kinds``; ``only``:
    the people and companies a question may be about (disjoint splits), else any."""
    people = only[0] if only else w.people
    p = people[int(rng.integers(len(people)))]
    city, comp = names[p["born_in"]], names[p["employer"]]
    country = names[city["country"]]
    low, high = _KINDS[kinds]
    kind = int(rng.integers(high)) if low == 0 else low + int(rng.integers(high - low))
    if kind == 0:
        return f"In which city was {p['name']} born?", city["name"], [p["id"]], "single"
    if kind == 1:
        return f"In what year was {p['name']} born?", str(p["born"]), [p["id"]], "single"
    if kind == 2:
        return f"Which company does {p['name']} work for?", comp["name"], [p["id"]], "single"
    if kind == 3:
        if only:  # the company asked about is one of the split's, not the person's employer
            comp = only[1][int(rng.integers(len(only[1])))]
        return f"In what year was {comp['name']} founded?", str(comp["founded"]), [comp["id"]], "single"
    if kind == 4:
        return f"In which country was {p['name']} born?", country["name"], [p["id"], city["id"]], "multi"
    if kind == 5:
        return (f"Who founded the company that {p['name']} works for?", comp["founder"], [p["id"], comp["id"]], "multi")
    if kind == 6:
        return (
            f"Which river flows through the city where {p['name']} was born?",
            city["river"],
            [p["id"], city["id"]],
            "multi",
        )
    return (
        f"What is the capital city of the country where {p['name']} was born?",
        country["capital"],
        [p["id"], city["id"], country["id"]],
        "multi",
    )


@generated_once()
def generate_search_tasks(
    w: World, n: int = 1000, seed: int = 0, split: str = "train", kinds: str = "all", disjoint: bool = False
) -> TaskSet:
    """``n`` questions about ``w``; ``meta`` holds gold ids (in hop order) and hops.

    ``kinds``: ``"all"`` (single- and multi-hop, the default), ``"single"`` or ``"multi"`` (only
    multi-hop questions: 2 or 3 passages, the answer in the last one, reachable only through the
    bridge entity named in the one before: the person's city, company or country; a question whose
    answer the first passage already holds, such as a founder asking about himself, is drawn again).
    ``disjoint``: the questions name only the split's own people and companies (:func:`split_of`;
    the module doc); default: any, as every study before 5 Dec drew them.
    Generated once per process for each world (by identity) and arguments, and shared.
    """
    if kinds not in _KINDS:
        raise TaskError(f"kinds must be one of {sorted(_KINDS)}, got {kinds!r}.")
    if split not in _SPLITS:
        raise TaskError(f"split must be one of {sorted(_SPLITS)}, got {split!r}.")
    if n < 1:
        raise TaskError(f"the number of tasks must be >= 1, got {n}.")
    rng = np.random.default_rng([seed, _SPLITS[split], 11])
    names = _by_name(w)
    only = None
    if disjoint:
        own = lambda kind: tuple(e for e in kind if split_of(e["id"]) == split)  # noqa: E731
        only = (own(w.people), own(w.companies))
        if not all(only):
            raise TaskError(
                f"the world is too small for disjoint splits: its {split} split has {len(only[0])} people and "
                f"{len(only[1])} companies; use more world_people (300 gives each split some of both)."
            )
    texts = {p.id: p.text for p in world_passages(w)} if kinds == "multi" else {}
    tasks = []
    for k in track(range(n), desc="search tasks", unit="task"):
        q, a, gold, kind = _question(w, names, rng, kinds, only)
        while kinds == "multi" and a in texts[gold[0]]:  # e.g. the founder is the person asked about
            q, a, gold, kind = _question(w, names, rng, kinds, only)
        meta = {"gold_ids": gold, "hops": len(gold), "kind": kind}
        tasks.append(Task(f"search-{split}-{seed}-{k:05d}", q, [a], meta))
    label = ("" if kinds == "all" else f", {kinds}-hop only") + (", disjoint" if disjoint else "")
    return TaskSet(tasks, name=f"generated search ({split}, seed {seed}{label})")


_SEARCH_R1_QUESTION = re.compile(r"Question:\s*(.+?)\s*$", re.DOTALL)


def _search_r1_question(rec: Mapping[str, Any], where: str) -> str:
    """The question of a Search-R1 / verl row whose ``question`` column was dropped: the text after
    the last ``Question:`` of its last user message (the whole message if it has none)."""
    prompt = rec.get("prompt")
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        text = str(users[-1]) if users else ""
    else:
        text = str(prompt or "")
    m = _SEARCH_R1_QUESTION.search(text[text.rfind("Question:") :]) if "Question:" in text else None
    question = m.group(1) if m else text.strip()
    if not question:
        raise TaskError(f"{where}: missing field 'question' (or a Search-R1 'prompt'); fields: {sorted(rec)[:10]}.")
    return question


def _gold_answers(rec: Mapping[str, Any], where: str) -> list[str]:
    raw = rec.get("golden_answers", rec.get("answers", rec.get("answer")))
    if raw is None:  # Search-R1 / verl: reward_model.ground_truth.target
        truth = (rec.get("reward_model") or {}).get("ground_truth")
        raw = truth.get("target") if isinstance(truth, Mapping) else truth
    if raw is None:
        raise TaskError(
            f"{where}: missing field 'golden_answers' or 'answer' (or Search-R1's reward_model.ground_truth.target) "
            f"(fields present: {sorted(rec)[:10]})."
        )
    if isinstance(raw, Mapping) and "text" in raw:  # SQuAD-style {"text": [...]}
        raw = raw["text"]
    return [str(a) for a in (raw if isinstance(raw, list | tuple) else [raw]) if str(a).strip()]


def _gold_titles(facts: Any) -> list[str] | None:
    """HotpotQA's supporting-fact titles: ``[[title, sent], ...]`` (the original json) or
    ``{"title": [...], "sent_id": [...]}`` (the Hugging Face release)."""
    if isinstance(facts, Mapping) and isinstance(facts.get("title"), list):
        return sorted({str(t) for t in facts["title"]})
    if isinstance(facts, list):
        return sorted({str(f[0]) for f in facts if isinstance(f, list | tuple) and f})
    return None


def qa_record(rec: Mapping[str, Any], where: str, default_id: str) -> Task:
    """A QA task from an NQ (FlashRAG ``question``/``golden_answers``, ``nq_open`` ``answer`` list),
    HotpotQA (``_id``/``id``, ``question``, ``answer``, ``supporting_facts``, ``type``, ``level``) or
    Search-R1 parquet row (``prompt`` messages, ``reward_model.ground_truth.target``), in a file or
    in memory alike; optional ``gold_ids`` (passage ids)."""
    question = str(rec["question"]).strip() if rec.get("question") is not None else _search_r1_question(rec, where)
    answers = _gold_answers(rec, where)
    if not question or not answers:
        raise TaskError(f"{where}: 'question' and the gold answers must be non-empty.")
    meta: dict[str, Any] = {k: rec[k] for k in ("gold_ids", "type", "level", "data_source") if k in rec}
    titles = _gold_titles(rec.get("supporting_facts"))
    if titles is not None:
        meta["gold_titles"] = titles
    extra = rec.get("extra_info")
    tid = rec.get("id", rec.get("_id"))
    if tid is None and isinstance(extra, Mapping) and extra.get("index") is not None:
        tid = f"{extra.get('split', 'row')}-{extra['index']}"
    return Task(str(tid if tid is not None else default_id), question, answers, meta)


def load_qa_file(path: str | Path, split: str | None = None) -> TaskSet:
    """Load NQ / HotpotQA / Search-R1 QA records (:func:`qa_record`) from a jsonl, json, parquet
    or arrow file or a dataset folder (:func:`prm_gym.core.records.read_records`)."""
    return load_task_set(path, qa_record, split)
