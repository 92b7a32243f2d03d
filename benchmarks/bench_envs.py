"""Per-step env overhead and reward agreement against GEM and skyrl-gym on identical tasks.

    python benchmarks/bench_envs.py [--reps 5] [--gem-python PATH] [--skyrl-python PATH]

For prm/Math-v0, prm/Search-v0 and prm/SQL-v0, builds one set of generated tasks and scripted
final answers (the gold answer and a wrong one per task), then plays every (task, answer) as one
episode -- ``reset`` then the answer step: parse + rule reward, no model -- on our env in-process
and on the nearest env of each peer in its own virtualenv (``benchmarks/peer_worker.py``), with
the answer written in each suite's native format:

=========  =============================  =====================================  ====================
kind       ours                           GEM (gem-llm)                          skyrl-gym
=========  =============================  =====================================  ====================
math       ``<answer>42</answer>``        MathEnv, ``\\boxed{42}``                GSM8kEnv, ``#### 42``
search     ``<answer>Oslo</answer>``      QaEnv, ``<answer>Oslo</answer>``       SearchEnv, same tags
sql        ``<answer>SELECT..</answer>``  (no SQL env)                          SQLEnv, ``<solution>``
=========  =============================  =====================================  ====================

Each side does one warm-up pass and ``--reps`` measured passes; the table shows the median mean
microseconds per answer step and per episode (reset + step) with the min-max over passes, and
how many of the cases the two suites' outcome verdicts agree on (ours: ``reward_outcome >= 0.5``;
theirs: ``reward >= 0.5``). Our envs run with their default judge expressions (outcome plus
format/tool/process terms, i.e. more work per step than the peers' outcome-only rewards).

Peers are looked for at ``$GEM_PYTHON`` / ``$SKYRL_PYTHON``, else ``/tmp/gem-venv/bin/python``
and ``/tmp/skyrl-venv/bin/python``; create them with
``python3.11 -m venv /tmp/gem-venv && /tmp/gem-venv/bin/pip install gem-llm datasets`` and
``python3.11 -m venv /tmp/skyrl-venv && /tmp/skyrl-venv/bin/pip install skyrl-gym``.
A peer that is missing or cannot run a kind is reported as a skipped row with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from result_line import emit, median, skipped, spread

from envs.base import ToolEnv
from envs.math import MathEnv
from envs.math_tasks import generate_math_tasks
from envs.search import SearchEnv
from envs.search_tasks import generate_search_tasks, generate_world
from envs.sql import SQLEnv
from envs.sql_tasks import generate_sql_tasks
from envs.tasks import Task, TaskSet

HERE = Path(__file__).resolve().parent
ENV_IDS = {"math": "prm/Math-v0", "search": "prm/Search-v0", "sql": "prm/SQL-v0"}
#: The outcome judge alone: the same work as the peers' outcome-only rewards.
OUTCOME_ONLY = {"math": "rule/math_equiv", "search": "rule/exact_match", "sql": "rule/execution_match"}
PEERS = {"gem": ("GEM", "GEM_PYTHON", "/tmp/gem-venv"), "skyrl": ("skyrl-gym", "SKYRL_PYTHON", "/tmp/skyrl-venv")}


def build_cases(kind: str, n: int, tmp: Path) -> tuple[TaskSet, list[tuple[Task, str]]]:
    """``n`` tasks of ``kind`` and two scripted answers each (the gold one and a wrong one)."""
    if kind == "math":  # integer answers only: gsm8k's strict "#### <number>" format cannot state 57/40
        pool = generate_math_tasks(8 * n, seed=5, split="test")
        tasks = [t for t in pool if re.fullmatch(r"-?\d+", str(t.answer))][:n]
        pairs = [(t, a) for t in tasks for a in (str(t.answer), str(int(str(t.answer)) + 1))]
    elif kind == "search":
        tasks = list(generate_search_tasks(generate_world(300, 0), n, seed=5, split="test"))
        golds = [str(t.answer[0]) for t in tasks]
        pairs = [(t, a) for i, t in enumerate(tasks) for a in (golds[i], golds[(i + 1) % n])]
    else:
        tasks = list(generate_sql_tasks(n, seed=11, split="test", cache_dir=tmp / "dbs"))
        pairs = [(t, a) for t in tasks for a in (str(t.answer), f"SELECT * FROM ({t.answer}) LIMIT 0")]
    return TaskSet(tasks, name=f"bench {kind}"), pairs


def make_ours(kind: str, tasks: TaskSet, outcome_only: bool) -> ToolEnv:
    """Our env for ``kind``: default judge expression, or the outcome judge alone."""
    kw: dict[str, Any] = {"judge": OUTCOME_ONLY[kind]} if outcome_only else {}
    if kind == "math":
        return MathEnv(tasks, **kw)
    if kind == "search":
        return SearchEnv(tasks, **kw)  # default index: the same 300-person world the tasks come from
    return SQLEnv(tasks, **kw)


def play_ours(
    kind: str, tasks: TaskSet, pairs: list[tuple[Task, str]], reps: int, outcome_only: bool
) -> tuple[list[float], ...]:
    """Warm-up pass, then ``reps`` passes: mean us per answer step and per episode; verdicts.

    Each pass gets a fresh env (built outside the timer), so no pass reuses the verdicts an
    earlier pass memoised: every step really parses and judges, as the peers' steps do.
    """
    step_us: list[float] = []
    episode_us: list[float] = []
    verdicts: list[float] = []
    for rep in range(reps + 1):
        env = make_ours(kind, tasks, outcome_only)
        step_total = episode_total = 0.0
        verdicts = []
        for task, answer in pairs:
            t0 = time.perf_counter()
            env.reset(options={"task_id": task.id})
            t1 = time.perf_counter()
            _, _, terminated, _, info = env.step(f"<answer>{answer}</answer>")
            t2 = time.perf_counter()
            assert terminated and info["reward_status"] == "ok", info
            verdicts.append(float(info["reward_outcome"] >= 0.5))
            step_total += t2 - t1
            episode_total += t2 - t0
        env.close()
        if rep:
            step_us.append(step_total / len(pairs) * 1e6)
            episode_us.append(episode_total / len(pairs) * 1e6)
    return step_us, episode_us, verdicts


def native(peer: str, kind: str, answer: str) -> str:
    """``answer`` written the way the peer's env expects it."""
    if kind == "math":
        return f"\\boxed{{{answer}}}" if peer == "gem" else f"Reasoning done.\n#### {answer}"
    if kind == "sql":
        return f"<think>final query</think>\n<solution>{answer}</solution>"
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


def run_peer(peer: str, python: str, kind: str, pairs: list[tuple[Task, str]], reps: int, tmp: Path) -> dict[str, Any]:
    """Run ``peer_worker.py`` in the peer's Python on the same cases; its JSON report."""
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
    job.write_text(json.dumps({"peer": peer, "kind": kind, "reps": reps, "db_root": db_root, "cases": cases}))
    proc = subprocess.run(
        [python, str(HERE / "peer_worker.py"), str(job)], capture_output=True, text=True, timeout=900, cwd=tmp
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"error": f"worker exit {proc.returncode}: {(proc.stderr.strip().splitlines() or ['?'])[-1][:200]}"}
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def compare(kind: str, peer: str, ours: dict[str, tuple[list[float], ...]], theirs: dict[str, Any]) -> None:
    """Print the human rows and the RESULT lines of one (env, peer) comparison.

    ``ours`` maps ``"outcome"`` (the outcome judge alone: the same work as the peer) and
    ``"default"`` (the env's default judge expression) to :func:`play_ours` results.
    """
    label, env_id = PEERS[peer][0], ENV_IDS[kind]
    base = f"{label} {theirs['env']}"
    rows = [
        ("outcome", 0, "step_us", f"answer step, {OUTCOME_ONLY[kind]} only"),
        ("default", 0, "step_us", "answer step, default judges"),
        ("outcome", 1, "episode_us", f"reset + answer step, {OUTCOME_ONLY[kind]} only"),
    ]
    for config, i, key, what in rows:
        mine = ours[config][i]
        o, t = median(mine), median(theirs[key])
        print(f"{env_id:<14} {what:<44} ours {o:8.1f} us  {base:<20} {t:8.1f} us  {t / o:5.2f}x")
        note = "ours also runs format/tool/process judges" if config == "default" else ""
        spreads = f"ours {spread(mine)}, {label} {spread(theirs[key])}"
        emit("envs", f"{env_id} {what}", o, t, f"{base}, same tasks and answers", "us", "lower", spreads, note)
    agree = sum((a >= 0.5) == (r >= 0.5) for a, r in zip(ours["outcome"][2], theirs["rewards"], strict=True))
    n = len(ours["outcome"][2])
    print(f"{env_id:<14} {'outcome agreement':<44} {agree}/{n} cases agree with {base}")
    emit("envs", f"{env_id} reward agreement with {label}", agree, n, f"{base}: all cases", "cases agreeing", "higher")


def peer_python(peer: str, override: str) -> str:
    name, var, venv = PEERS[peer]
    return override or os.environ.get(var, "") or str(Path(venv) / "bin" / "python")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=60, help="tasks per env (two answers each)")
    ap.add_argument("--gem-python", default="")
    ap.add_argument("--skyrl-python", default="")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory(prefix="bench-envs-") as tmpdir:
        tmp = Path(tmpdir)
        for kind in ENV_IDS:
            tasks, pairs = build_cases(kind, args.tasks, tmp)
            ours = {
                config: play_ours(kind, tasks, pairs, args.reps, config == "outcome")
                for config in ("outcome", "default")
            }
            print(f"\n{ENV_IDS[kind]}: {len(pairs)} episodes per pass, {args.reps} passes after a warm-up")
            for peer in PEERS:
                python = peer_python(peer, getattr(args, f"{peer}_python"))
                if not Path(python).exists():
                    reason = f"{python} not found (see this script's docstring to install {PEERS[peer][0]})"
                    print(f"{ENV_IDS[kind]:<14} vs {PEERS[peer][0]}: skipped, {reason}")
                    skipped("envs", f"{ENV_IDS[kind]} vs {PEERS[peer][0]}", PEERS[peer][0], reason, "us")
                    continue
                theirs = run_peer(peer, python, kind, pairs, args.reps, tmp)
                if "error" in theirs:
                    print(f"{ENV_IDS[kind]:<14} vs {PEERS[peer][0]}: skipped, {theirs['error']}")
                    skipped("envs", f"{ENV_IDS[kind]} vs {PEERS[peer][0]}", PEERS[peer][0], theirs["error"], "us")
                    continue
                compare(kind, peer, ours, theirs)


if __name__ == "__main__":
    main()
