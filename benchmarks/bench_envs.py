"""Per-step env overhead and reward agreement against GEM and skyrl-gym on identical tasks.

    python benchmarks/bench_envs.py [--reps 5] [--gem-python PATH] [--skyrl-python PATH]

For prm/Math-v0, prm/Search-v0 and prm/SQL-v0, builds one set of generated tasks and scripted
final answers (the gold answer and a wrong one per task), then plays every (task, answer) as one
episode -- ``reset`` then the answer step: parse + rule reward, no model -- on our env in-process
and on the nearest env of each peer in its own virtualenv (``benchmarks/peer_worker.py``), with
the answer written in each suite's native format:

===========  ==================================  =====================================  ====================
kind         ours                                GEM (gem-llm)                          skyrl-gym
===========  ==================================  =====================================  ====================
math         R ``<answer>\\boxed{42}</answer>``  MathEnv, R ``\\boxed{42}``              (not compared)
math         R ``<answer>42</answer>``           (not compared)                         GSM8kEnv, R ``#### 42``
search       ``<answer>Oslo</answer>``           QaEnv, ``<answer>Oslo</answer>``       SearchEnv, same tags
sql          ``<answer>SELECT..</answer>``       (no SQL env)                           SQLEnv, ``<solution>``
search_tool  ``<tool_call>`` search             QaEnv + SearchTool, ``<search>``       SearchEnv, ``<search>``
===========  ==================================  =====================================  ====================

Like for like: R is the same 70 characters of reasoning before the answer on every side. Against
GEM, whose MathEnv always runs math-verify on a ``\\boxed{}`` answer, ours answers boxed too, the
same answer form (ours decides a boxed number exactly and sends math-verify only what exact numbers
and the MATH grader's normalised string cannot decide); against skyrl-gym's string compare, ours
answers the plain number. SQL answers get a query text no earlier pass used
(``fresh_text.fresh_sql``, on both sides), so no cache keyed by the text answers. ``search_tool``
is the whole user-visible tool step, retrieval included: one search call over the 106k-passage
world (80,000 people), every peer against the same ``RetrievalServer`` process over HTTP; ours both
over HTTP to that server and with the index embedded. Construction rows time building an env with
default arguments (ours: ``gym.make`` after the first build, wrappers included; the peers: their
env class), passes alternated the same way.

Each side does one warm-up pass and ``--reps`` measured passes (garbage collected before each
pass, collector left on during it, on both sides: see ``result_line.settle``); the table
shows the median over passes of the mean microseconds per answer step and per episode (reset +
step), the min-max over passes, and how many of the cases the two suites' outcome verdicts agree
on (ours: ``reward_outcome >= 0.5``; theirs: ``reward >= 0.5``). Our envs run twice: with the
outcome judge alone (the same work as the peers' outcome-only rewards) and with their default
judge expressions (plus format/tool/process/partial-credit terms: more work than the peers do).
Each pass gets a fresh env, so no pass reuses verdicts memoised by an earlier one; what never
changes per task (gold SQL rows, the gold query's parse) is cached for the process, as in training.

Both sides are timed on the env classes themselves (ours unwrapped, not through ``gym.make``'s
wrappers; the peers' classes likewise, not through ``gem.make``), with the action strings built
before the timer starts. skyrl-gym's envs take their task at construction, so its "reset" is
constructing the env and ``init``.

Peers run in their own virtualenvs, made by ``make bench-peers`` under ``.venv-peers/gem`` and
``.venv-peers/skyrl`` from the pinned sets in ``benchmarks/peers/``; ``--gem-python`` /
``--skyrl-python`` or ``$GEM_PYTHON`` / ``$SKYRL_PYTHON`` point elsewhere. A peer that is not
installed, fails, or has no env of a kind is reported as a skipped row with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_search import served
from envs_construction import construction, construction_goal
from envs_notes import CONDITIONS, MISS_REASON, RESET_REASON
from envs_sqlparse import goal_note, shape_pass, sqlglot_build
from fresh_text import fresh_sql
from peer_client import PeerSession, not_installed, peer_python
from result_line import emit, median, per_call_us, settle, skipped, spread

from prm_gym.core.parsing import format_tool_call, parse_action
from prm_gym.core.tasks import Task, TaskSet
from prm_gym.envs.base import ToolEnv
from prm_gym.envs.math.env import MathEnv
from prm_gym.envs.math.tasks import generate_math_tasks
from prm_gym.envs.search.env import SearchEnv
from prm_gym.envs.search.index import BM25Index
from prm_gym.envs.search.tasks import generate_search_tasks, generate_world, world_passages
from prm_gym.envs.sql.env import SQLEnv
from prm_gym.envs.sql.tasks import generate_sql_tasks

ENV_IDS = {"math": "prm/Math-v0", "search": "prm/Search-v0", "sql": "prm/SQL-v0", "search_tool": "prm/Search-v0"}
#: The same 70 characters of reasoning before every math answer, on every side.
REASONING = "First, 8 boxes hold 9 each, so 8 * 9 = 72 in all; the rest adds up. "[:70]
#: People in the world the search tool rows retrieve from (~106k passages).
TOOL_WORLD = 80_000
#: The outcome judge alone: the same work as the peers' outcome-only rewards.
OUTCOME_ONLY = {"math": "rule/math_equiv", "search": "rule/exact_match", "sql": "rule/execution_match"}
#: Peer key (its venv under .venv-peers, and $<KEY>_PYTHON) -> the name the table shows.
PEERS = {"gem": "GEM", "skyrl": "skyrl-gym"}
SAME = "unwrapped env classes both sides, same tasks and answers, passes interleaved"
Sample = tuple[float, float, list[float]]  # (mean us per step, mean us per episode, verdicts)


def build_cases(kind: str, n: int, tmp: Path) -> tuple[TaskSet, list[tuple[Task, str]]]:
    """``n`` tasks of ``kind`` and two scripted answers each (the gold one and a wrong one);
    for ``search_tool``, one search query each (the question)."""
    if kind == "math":  # integer answers only: gsm8k's strict "#### <number>" format cannot state 57/40
        pool = generate_math_tasks(8 * n, seed=5, split="test")
        tasks = [t for t in pool if re.fullmatch(r"-?\d+", str(t.answer))][:n]
        pairs = [(t, a) for t in tasks for a in (str(t.answer), str(int(str(t.answer)) + 1))]
    elif kind == "search":
        tasks = list(generate_search_tasks(generate_world(300, 0), n, seed=5, split="test"))
        golds = [str(t.answer[0]) for t in tasks]
        pairs = [(t, a) for i, t in enumerate(tasks) for a in (golds[i], golds[(i + 1) % n])]
    elif kind == "search_tool":
        tasks = list(generate_search_tasks(generate_world(TOOL_WORLD, 0), 2 * n, seed=5, split="test"))
        pairs = [(t, t.prompt) for t in tasks]
    else:
        tasks = list(generate_sql_tasks(n, seed=11, split="test", cache_dir=tmp / "dbs"))
        pairs = [(t, a) for t in tasks for a in (str(t.answer), f"SELECT * FROM ({t.answer}) LIMIT 0")]
    return TaskSet(tasks, name=f"bench {kind}"), pairs


#: Episodes per pass at most for each peer's form: GEM's math step runs math-verify (milliseconds).
SLOW_FORMS = {("math", "gem"): 120}


def subset(kind: str, form: str, pairs: list[tuple[Task, str]]) -> list[tuple[Task, str]]:
    """The cases a form is played on: all of them, or the first few for a slow peer."""
    return pairs[: SLOW_FORMS.get((kind, form), len(pairs))]


def forms(kind: str) -> list[str]:
    """Our answer forms of ``kind``: one per peer when the like-for-like form differs by peer."""
    return list(PEERS) if kind == "math" else ["any"]


def configs(kind: str) -> list[str]:
    """Our env configurations of ``kind``: judge sets, or (search tool) where the index lives."""
    return ["embedded", "http"] if kind == "search_tool" else ["outcome", "default"]


def our_action(kind: str, form: str, answer: str, tag: str) -> str:
    """Our action for ``answer``, in the form that matches the peer's (see the module docstring)."""
    if kind == "math":
        return (
            f"{REASONING}<answer>\\boxed{{{answer}}}</answer>"
            if form == "gem"
            else f"{REASONING}<answer>{answer}</answer>"
        )
    if kind == "sql":
        return f"<answer>{fresh_sql(answer, tag)}</answer>"
    if kind == "search_tool":
        return format_tool_call("search", {"query": answer})
    return f"<answer>{answer}</answer>"


def make_ours(kind: str, tasks: TaskSet, config: str, where: dict[str, Any]) -> ToolEnv:
    """Our env for ``kind`` in ``config`` (see :func:`configs`); ``where`` holds the tool rows' index and URL."""
    kw: dict[str, Any] = {"judge": OUTCOME_ONLY[kind]} if config == "outcome" else {}
    if kind == "math":
        return MathEnv(tasks, **kw)
    if kind == "search":
        return SearchEnv(tasks, **kw)  # default index: the same 300-person world the tasks come from
    if kind == "search_tool":
        return SearchEnv(tasks, index=where["index"] if config == "embedded" else where["url"])
    return SQLEnv(tasks, **kw)


def our_pass(kind: str, env: ToolEnv, episodes: list[tuple[dict[str, str], str]]) -> Sample:
    """One timed pass on a fresh env (built outside the timer, so no pass reuses the verdicts an
    earlier one memoised): mean us per step and per episode, and the outcome verdicts."""
    step_total = episode_total = 0.0
    verdicts: list[float] = []
    settle()
    for options, action in episodes:
        t0 = time.perf_counter()
        env.reset(options=options)
        t1 = time.perf_counter()
        _, _, terminated, _, info = env.step(action)
        t2 = time.perf_counter()
        if kind == "search_tool":
            assert info["tool"]["ok"] and info["retrieval"]["passages"] == 3, info
        else:
            assert terminated and info["reward_status"] == "ok", info
            verdicts.append(float(info["reward_outcome"] >= 0.5))
        step_total += t2 - t1
        episode_total += t2 - t0
    env.close()
    return step_total / len(episodes) * 1e6, episode_total / len(episodes) * 1e6, verdicts


def parse_cost(kind: str, pairs: list[tuple[Task, str]], reps: int) -> float:
    """Median microseconds per action of ``parse_action`` alone on our actions (a part of our step)."""
    actions = [our_action(kind, forms(kind)[-1], answer, f"parse_{i}") for i, (_, answer) in enumerate(pairs)]
    means: list[float] = []
    for _ in range(reps + 1):
        settle()
        t0 = time.perf_counter()
        for action in actions:
            parse_action(action)
        means.append((time.perf_counter() - t0) / len(actions) * 1e6)
    return median(means[1:])


def contract_floor(reps: int, n: int = 20000) -> float:
    """Median microseconds to build, from constants, the info dict docs/contract.md requires of a math
    answer step (the reward term, status, ids, the judge's verdict, parse and tool diagnostics):
    a floor under any step that keeps the contract, whatever its parse and judges cost."""

    def info() -> dict[str, Any]:
        return {
            "reward_outcome": 1.0,
            "reward_status": "ok",
            "task_id": "math-test-0",
            "turn": 1,
            "answer": "72",
            "judge": {"rule/math_equiv": {"score": 1.0}},
            "parse": {"ok": True, "issues": ""},
            "tool": {"calls": 0, "failed": 0, "ok": True, "name": "", "latency_s": 0.0},
        }

    return median([per_call_us(info, n) for _ in range(reps + 1)][1:])  # the first round warms up


def native(peer: str, kind: str, answer: str) -> str:
    """``answer`` written the way the peer's env expects it (the same reasoning as ours for math)."""
    if kind == "math":
        return f"{REASONING}\\boxed{{{answer}}}" if peer == "gem" else f"{REASONING}#### {answer}"
    if kind == "sql":
        return f"<think>final query</think>\n<solution>{answer}</solution>"
    if kind == "search_tool":
        return f"<search>{answer}</search>"
    return f"<answer>{answer}</answer>"


def skyrl_db_root(pairs: list[tuple[Task, str]], tmp: Path) -> Path:
    """skyrl-gym's SQL layout (``<root>/spider/database/<db>/<db>.sqlite``), copies of our databases."""
    root = tmp / "skyrl-db"
    for task, _ in pairs:
        src = Path(str(task.meta["db_path"]))
        dst = root / "spider" / "database" / src.stem / f"{src.stem}.sqlite"
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    return root


def start_peer(
    peer: str, python: Path, kind: str, pairs: list[tuple[Task, str]], tmp: Path, url: str
) -> PeerSession | str:
    """A running ``peer_worker.py`` in the peer's Python on the same cases, or why there is none."""
    if not python.exists():
        return not_installed(python)
    cases = [
        {
            "prompt": task.prompt,
            "gold": str(task.answer[0]) if isinstance(task.answer, list) else str(task.answer),
            "action": native(peer, kind, answer),
            "db_id": Path(str(task.meta.get("db_path", ""))).stem,
        }
        for task, answer in pairs
    ]
    db_root = str(skyrl_db_root(pairs, tmp)) if kind == "sql" and peer == "skyrl" else ""
    job = tmp / f"job-{peer}-{kind}.json"
    spec = {"peer": peer, "kind": kind, "db_root": db_root, "cases": cases, "fresh_sql": kind == "sql"}
    job.write_text(json.dumps(spec | {"search_url": f"{url}/retrieve" if url else ""}))
    session = PeerSession(str(python), job, cwd=tmp)
    if session.error:
        session.close()
        return session.error
    return session


ROWS = {
    "outcome": "answer step, {judge} only",
    "default": "answer step, default judges",
    "embedded": "search tool step incl. retrieval (106k passages), embedded index",
    "http": "search tool step incl. retrieval (106k passages), over HTTP",
}


def compare(
    kind: str,
    peer: str,
    ours: dict[tuple[str, str], list[list[float]]],
    theirs: dict[str, Any],
    extra: list[str],
    parse_us: float = 0.0,
    shape_us: float = 0.0,
    floor_us: float = 0.0,
) -> None:
    """Print the human rows and the RESULT lines of one (env, peer) comparison.

    ``ours`` maps (form, config) to [step us per pass, episode us per pass, verdicts]; ``extra``
    names the judges the default expression runs beyond the outcome judge; ``parse_us`` and
    ``shape_us`` are what parse_action and (SQL) the sqlglot parse alone take of our step;
    ``floor_us`` (math) is what building the contract's info dict alone takes.
    """
    label, env_id = PEERS[peer], ENV_IDS[kind]
    form = peer if kind == "math" else "any"
    base = f"{label} {theirs.get('version', '')} {theirs['env']}".replace("  ", " ")
    cond = "; ".join(filter(None, [SAME, CONDITIONS[(kind, form)], sqlglot_build() if kind == "sql" else ""]))
    rows = [(c, 0, "step_us", ROWS[c].format(judge=OUTCOME_ONLY.get(kind, ""))) for c in configs(kind)]
    if kind != "search_tool":
        rows.append(("outcome", 1, "episode_us", f"reset + answer step, {OUTCOME_ONLY[kind]} only"))
    for config, i, key, what in rows:
        mine = ours[(form, config)][i]
        o, t = median(mine), median(theirs[key])
        print(f"{env_id:<14} {what:<62} ours {o:8.1f} us  {base:<26} {t:8.1f} us  {t / o:5.2f}x")
        note = f"ours also runs {', '.join(extra)}" if config == "default" else ""
        if config == "embedded":
            note = "ours searches in-process (no HTTP hop); the peer cannot embed the index"
        if t < o:
            why = RESET_REASON[kind] if key == "episode_us" else ""
            if config == "default" or kind != "sql":
                numbers = {"parse": f"{parse_us:.2f}", "floor": f"{floor_us:.2f}", "peer": f"{t:.2f}"}
                numbers |= {"both": f"{parse_us + floor_us:.2f}", "miss": f"{o / t:.1f}"}
                why = "; ".join(filter(None, [MISS_REASON.get((peer, kind), "").format(**numbers), why]))
            note = "; ".join(filter(None, [note, why]))
        if kind == "sql" and config == "default" and peer == "skyrl":
            outcome_us = median(ours[(form, "outcome")][0])
            note = "; ".join(filter(None, [note, goal_note(o, t, shape_us, outcome_us)]))
        spreads = f"ours {spread(mine)}, {label} {spread(theirs[key])}"
        emit("envs", f"{env_id} {what}", o, t, f"{base}, {cond}", "us", "lower", spreads, note)
    if kind == "search_tool":
        return
    agree = sum((a >= 0.5) == (r >= 0.5) for a, r in zip(ours[(form, "outcome")][2], theirs["rewards"], strict=True))
    n = len(ours[(form, "outcome")][2])
    print(f"{env_id:<14} {'outcome agreement':<62} {agree}/{n} cases agree with {base}")
    emit("envs", f"{env_id} reward agreement with {label}", agree, n, f"{base}: all cases", "cases agreeing", "higher")


def default_extras(kind: str, tasks: TaskSet, where: dict[str, Any]) -> list[str]:
    """The judges of ``kind``'s default expression other than its outcome judge."""
    env = make_ours(kind, tasks, "default", where)
    env.close()
    return [jid for jid in env.judge_spec.ids if jid != OUTCOME_ONLY.get(kind)]


def measure(
    kind: str, tasks: TaskSet, pairs: list[tuple[Task, str]], args: argparse.Namespace, tmp: Path, where: dict[str, Any]
) -> None:
    """Interleave our passes (every form and config) with every peer's, then print the comparisons."""
    url = where.get("url", "") if kind == "search_tool" else ""
    peers: dict[str, PeerSession | str] = {
        peer: start_peer(
            peer, peer_python(peer, getattr(args, f"{peer}_python")), kind, subset(kind, peer, pairs), tmp, url
        )
        for peer in PEERS
    }
    ours: dict[tuple[str, str], list[list[float]]] = {(f, c): [[], [], []] for f in forms(kind) for c in configs(kind)}
    theirs: dict[str, dict[str, Any]] = {p: {"step_us": [], "episode_us": []} for p in PEERS}
    shapes: list[float] = []  # sql: one parse alone, timed in every round like the steps
    for rep in range(args.reps + 1):  # pass 0 of every side is the warm-up
        for (form, config), (steps, eps, verdicts) in ours.items():
            episodes = [
                ({"task_id": task.id}, our_action(kind, form, answer, f"ours_{config}_r{rep}_{i}"))
                for i, (task, answer) in enumerate(subset(kind, form, pairs))
            ]
            step_us, episode_us, verdicts[:] = our_pass(kind, make_ours(kind, tasks, config, where), episodes)
            if rep:
                steps.append(step_us)
                eps.append(episode_us)
        for peer, session in peers.items():
            if isinstance(session, PeerSession) and not session.error:
                reply = session.ask("pass")
                for key in ("step_us", "episode_us"):
                    if rep and key in reply:
                        theirs[peer][key].append(reply[key])
        if kind == "sql":
            shapes.append(shape_pass([answer for _, answer in pairs], rep))
    counts = ", ".join(f"{PEERS.get(f, 'all')}: {len(subset(kind, f, pairs))}" for f in forms(kind))
    print(f"\n{ENV_IDS[kind]} ({kind}): episodes per pass ({counts}), {args.reps} passes after a warm-up, interleaved")
    parse_us = parse_cost(kind, pairs, args.reps)
    print(f"{ENV_IDS[kind]:<14} of our step, parse_action alone takes {parse_us:.2f} us")
    floor_us = contract_floor(args.reps) if kind == "math" else 0.0
    if kind == "math":
        print(f"{ENV_IDS[kind]:<14} building the info dict of the contract alone takes {floor_us:.2f} us")
    shape_us = median(shapes[1:]) if kind == "sql" else 0.0
    if kind == "sql":
        print(f"{ENV_IDS[kind]:<14} of our default-judge step, one sqlglot parse alone takes {shape_us:.1f} us")
    if kind != "search_tool":
        construction(ENV_IDS[kind], peers, args.reps)
    for peer, session in peers.items():
        reply = session.ask("end") if isinstance(session, PeerSession) else {"error": session}
        if isinstance(session, PeerSession):
            theirs[peer] |= {**session.hello, **reply}
            session.close()
        if "error" in reply:
            print(f"{ENV_IDS[kind]:<14} vs {PEERS[peer]}: skipped, {reply['error']}")
            skipped("envs", f"{ENV_IDS[kind]} ({kind}) vs {PEERS[peer]}", PEERS[peer], str(reply["error"]), "us")
            continue
        compare(kind, peer, ours, theirs[peer], default_extras(kind, tasks, where), parse_us, shape_us, floor_us)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--tasks",
        default="math=1000,search=1000,sql=60,search_tool=100",
        help="tasks per kind (two answers each): kind=N,... or one N for every kind",
    )
    every = [*ENV_IDS, "construction"]
    ap.add_argument("--kinds", default=",".join(every), help="comma-separated subset of " + ",".join(every))
    ap.add_argument("--gem-python", default="")
    ap.add_argument("--skyrl-python", default="")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    kinds = [k for k in args.kinds.split(",") if k]
    with tempfile.TemporaryDirectory(prefix="bench-envs-") as tmpdir, contextlib.ExitStack() as stack:
        tmp = Path(tmpdir)
        where: dict[str, Any] = {}
        if "search_tool" in kinds:
            where = stack.enter_context(tool_world(tmp))
        if args.tasks.isdigit():
            sizes = dict.fromkeys(ENV_IDS, int(args.tasks))
        else:
            sizes = {k: int(v) for k, v in (item.split("=") for item in args.tasks.split(","))}
        for kind in kinds:
            if kind in ENV_IDS:
                tasks, pairs = build_cases(kind, sizes.get(kind, 60), tmp)
                measure(kind, tasks, pairs, args, tmp, where)
        if "construction" in kinds:
            print()
            construction_goal(args.reps)


@contextlib.contextmanager
def tool_world(tmp: Path) -> Iterator[dict[str, Any]]:
    """The 106k-passage world's index, embedded and served by a RetrievalServer in its own process."""
    index = BM25Index.build(world_passages(generate_world(TOOL_WORLD, 0))).warm()
    index.save(tmp / "tool-index")
    with served(tmp / "tool-index") as url:  # the same server process bench_search.py times
        yield {"index": index, "url": url}


if __name__ == "__main__":
    main()
