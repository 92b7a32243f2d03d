"""Load on the env server: many concurrent ``RemoteEnv`` clients against a real ``prm-serve`` (issue 45, item 2).

    .venv/bin/python benchmarks/bench_serve_load.py [--minutes 10] [--clients 64] [--envs math,sql,search,code]
        [--max-sessions N] [--burn | --no-burn] [--rounds 2] [--json PATH]

For each env (prm/Math-v0, prm/SQL-v0, prm/Search-v0, prm/Code-v0) a ``prm-serve`` subprocess is
started on a free loopback port, with a token (the path every server beyond loopback takes; the
clients send it), its own ``--max-sessions`` and ``--env-kwargs '{"num_tasks": 64}'``. Then
``--clients`` threads, each owning one ``RemoteEnv`` (one server session), play full episodes back
to back: ``reset(options={"task_id": ...})``, then ``step`` until terminated or truncated. Their
actions come from the tasks' own gold data (the same generated tasks, built here with the server's
kwargs; the server never sends gold data): a tool call that uses it (Math: ``calculator`` on the
gold answer; SQL: ``run_query`` of the gold query; Search: ``search`` for the question; Code:
``python`` running the reference solution), then the gold answer, so every episode has a tool turn
and a judged answer. One episode in 8 opens with a malformed tool call instead, one in 8 answers
wrongly.

Phases, per env:

1. **warm-up**: until every client finished its first episode, then ``--warmup-s`` more; the
   server's RSS and open fds are read here ("start").
2. **load**, ``--minutes`` in all. For an env with a burner (Code: ``while True: pass`` in the
   ``python`` tool, which burns a CPU until the sandbox's deadline, 10 s by default; SQL: an
   unbounded recursive CTE in ``run_query``, stopped at its ``query_timeout_s``, 2 s by default),
   the time is split into ``--rounds`` alternations A/B: A is the load alone, B the same load plus
   ONE extra client stepping the burning action back to back (a B window runs from the burner's
   first burning step to the end of its last one). The other clients' p99 step latency in B over A
   is the isolation figure (target of the issue: at most 2x). Math's calculator is bounded to 50 ms
   of CPU and a search over the 300-person index takes milliseconds: neither has a tool call that
   burns, so they run the load alone.
3. **overload**, ``--overload-s``: while the clients play on, more clients than the free sessions
   (``max-sessions - clients + max(4, clients // 8)``) each open a session, play one episode and
   close it, over and over; a session refused with 503 (the server holds ``--max-sessions``) is
   retried after an exponential backoff with jitter (0.05 s doubling to 1 s, each wait drawn in
   [d/2, d]), so the 503 path is exercised and counted. The server's RSS and fds are read again at
   its end ("end"), then every client closes its session and the server is stopped (SIGTERM,
   SIGKILL past 30 s); its processes, env workers and sandboxes included, must all be gone.

Figures, per env: episodes completed and episodes/s (in A, the load alone), client-side wall-clock
latency of ``reset`` and of ``step`` (p50, p99, ms), errors by kind (exception class or HTTP status;
the only acceptable one is a 503 past ``--max-sessions`` when a session is opened), the server
process's RSS (``VmRSS``), open fds (``/proc/<pid>/fd``) and threads at start and end and sampled
every ``--sample-s`` seconds (with its descendant processes' count, total PSS and fds, and the sessions
``/health`` reports), so one can see they stay flat. ``--json PATH`` writes everything, samples
included. RESULT lines (``result_line.py``): each env's episodes/s in the second half of the load
against the first half (no slow-down over time), server RSS and fds at the end against the start,
and the burner rows: the others' p99 with the burner against without.

Fairness conditions (printed with the measured load average): clients and server share ONE
machine. The client threads run in this one Python process (they share its GIL; their own JSON and
HTTP work is inside the latencies); ``prm-serve`` is a subprocess with one worker process per
session (plus, for Code, each session's warm bubblewrap sandboxes). The documented figures come from
the shared 2-core machine, where other jobs (a training study) were running: the latencies are this
box's, under that load; compare phases of one run (A against B are alternated so both see the same
background), not runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_line import emit, skipped
from serve_process import Sampler, Server

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.parsing import format_tool_call
from prm_gym.core.tasks import Task
from prm_gym.envs.remote import RemoteEnv, RemoteEnvError, RemoteEnvUnavailable

ENV_IDS = {"math": "prm/Math-v0", "sql": "prm/SQL-v0", "search": "prm/Search-v0", "code": "prm/Code-v0"}
#: Tasks per session (the server's --env-kwargs): a session is made in ~0.1 s.
NUM_TASKS = 64
#: The tool call that burns CPU until its deadline, for the envs that have one (see the docstring).
BURN = {
    "prm/Code-v0": format_tool_call("python", {"code": "while True:\n    pass\n"}),
    "prm/SQL-v0": format_tool_call(
        "run_query", {"sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"}
    ),
}
#: The env kwarg holding the burning tool's deadline (set by --tool-timeout-s).
TOOL_DEADLINE = {"prm/Code-v0": "timeout_s", "prm/SQL-v0": "query_timeout_s"}
TOOLS = {"prm/Math-v0": "calculator", "prm/SQL-v0": "run_query", "prm/Search-v0": "search", "prm/Code-v0": "python"}
#: The error kind of a session refused because the server holds --max-sessions: the acceptable one.
FULL = "503 max-sessions (session refused)"
BACKOFF_START_S, BACKOFF_CAP_S = 0.05, 1.0
BACKOFF = f"exponential with jitter, {BACKOFF_START_S:g} s doubling to {BACKOFF_CAP_S:g} s, each wait in [d/2, d]"
#: What the sampler reads: the server's VmRSS, fds and threads; its descendants' (env workers,
#: sandboxes) count, total PSS and fds; the sessions /health reports.
SERVER_KEYS = ("rss_mib", "fds", "threads", "processes", "processes_pss_mib", "processes_fds", "sessions")
_STATUS = re.compile(r"answered (\d{3})")
_EXC_NAME = re.compile(r"\b(\w+(?:Error|Timeout|Exception))\b")


# --------------------------------------------------------------------------- actions
def _first(answer: Any) -> str:
    return str(answer[0] if isinstance(answer, list | tuple) and answer else answer)


def episode_actions(env_id: str, task: Task, variant: int) -> tuple[list[str], bool]:
    """The scripted actions of one episode of ``task`` and whether it answers with the gold answer.

    ``variant`` (0-7): 0-5 a tool call built from the gold data, then the gold answer; 6 a malformed
    tool call, then the gold answer; 7 the tool call, then a wrong answer."""
    gold = _first(task.answer)
    if env_id == "prm/Math-v0":
        tool = format_tool_call("calculator", {"expression": gold})
        answer, wrong = gold, "-1"
    elif env_id == "prm/SQL-v0":
        tool = format_tool_call("run_query", {"sql": gold})
        answer, wrong = gold, "SELECT 1"
    elif env_id == "prm/Search-v0":
        tool = format_tool_call("search", {"query": task.prompt[:200]})
        answer, wrong = gold, "nobody"
    elif env_id == "prm/Code-v0":
        tool = format_tool_call("python", {"code": f"{gold}\nprint('ran')\n"})
        answer, wrong = f"```python\n{gold}```", "```python\ndef f():\n    pass\n```"
    else:
        raise ValueError(f"no scripted actions for {env_id}")
    malformed = f'<tool_call>{{"name": "{TOOLS[env_id]}", "arguments": {{</tool_call>'
    if variant == 6:
        return [malformed, f"<answer>{answer}</answer>"], True
    if variant == 7:
        return [tool, f"<answer>{wrong}</answer>"], False
    return [tool, f"<answer>{answer}</answer>"], True


def local_tasks(env_id: str, kwargs: dict[str, Any]) -> list[Task]:
    """The tasks a session made with ``kwargs`` plays, built here for their gold data (Code's come
    from its generator directly, so that no sandbox starts in this process)."""
    if env_id == "prm/Code-v0":
        from prm_gym.envs.code.gen import generate_code_tasks

        split, seed = str(kwargs.get("split", "train")), int(kwargs.get("task_seed", 0))
        return list(generate_code_tasks(int(kwargs.get("num_tasks", 500)), seed, split))
    env = gym.make(env_id, **kwargs)
    try:
        return list(env.unwrapped.tasks)  # type: ignore[attr-defined]
    finally:
        env.close()


# --------------------------------------------------------------------------- errors
def classify(exc: BaseException) -> str:
    """An error's kind: the HTTP status where there is one, else the exception class."""
    if isinstance(exc, RemoteEnvError):
        return f"{exc.status} RemoteEnvError"
    if isinstance(exc, RemoteEnvUnavailable):
        return _unavailable(str(exc), "RemoteEnvUnavailable")
    return type(exc).__name__


def _unavailable(text: str, what: str) -> str:
    m = _STATUS.search(text)
    if m and m.group(1) == "503" and "--max-sessions" in text:
        return FULL
    if m:
        return f"{m.group(1)} {what}"
    if "no answer within" in text:
        return f"timeout {what}"
    if "cannot connect" in text:
        return f"connect {what}"
    name = _EXC_NAME.search(text)
    return f"{name.group(1) if name else 'other'} {what}"


def classify_turn(info: dict[str, Any]) -> str:
    """The kind of a turn ``RemoteEnv`` returned as ``infra_error``."""
    remote = info.get("remote")
    if isinstance(remote, dict) and remote.get("error"):
        return "step " + _unavailable(str(remote["error"]), "(infra_error turn)")
    return "infra_error turn from the env (a backend failed)"


# --------------------------------------------------------------------------- clients
@dataclass
class Rec:
    """What one client thread measured (only its own thread writes it)."""

    role: str
    seed: int
    reset_t: array[float] = field(default_factory=lambda: array("d"))
    reset_dt: array[float] = field(default_factory=lambda: array("d"))
    step_t: array[float] = field(default_factory=lambda: array("d"))
    step_dt: array[float] = field(default_factory=lambda: array("d"))
    episode_t: array[float] = field(default_factory=lambda: array("d"))
    gold: list[tuple[float, float]] = field(default_factory=list)  # (when, reward_outcome) of gold answers
    errors: list[tuple[float, str]] = field(default_factory=list)
    turns: Counter[str] = field(default_factory=Counter)
    opened: int = 0
    ready: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def error(self, kind: str) -> None:
        self.errors.append((time.monotonic(), kind))


@dataclass
class Ctx:
    """What every client of one env's run shares (read only)."""

    url: str
    token: str
    env_id: str
    tasks: list[Task]
    timeout_s: float


def _close(env: RemoteEnv | None) -> None:
    if env is not None:
        with contextlib.suppress(Exception):
            env.close()


def open_session(ctx: Ctx, rec: Rec, stop: threading.Event, rng: random.Random) -> RemoteEnv | None:
    """A new session; on a refusal (503 past --max-sessions, or any other failure) wait and retry,
    with exponential backoff and jitter, until ``stop``. None when stopped first."""
    delay = BACKOFF_START_S
    while not stop.is_set():
        try:
            env = RemoteEnv(ctx.url, env_id=ctx.env_id, timeout_s=ctx.timeout_s, token=ctx.token)
        except Exception as exc:
            rec.error(classify(exc))
            rec.ready.set()  # for the warm-up: this client was served, if only with a refusal
            stop.wait(delay * rng.uniform(0.5, 1.0))
            delay = min(2 * delay, BACKOFF_CAP_S)
            continue
        rec.opened += 1
        return env
    return None


def play_episode(env: RemoteEnv, ctx: Ctx, rec: Rec, k: int, stop: threading.Event, rng: random.Random) -> None:
    """One scripted episode (see :func:`episode_actions`); stops early on ``stop`` or an infra_error turn."""
    task = ctx.tasks[rng.randrange(len(ctx.tasks))]
    actions, gold = episode_actions(ctx.env_id, task, k % 8)
    t0 = time.monotonic()
    env.reset(seed=k, options={"task_id": task.id})
    rec.reset_t.append(t0)
    rec.reset_dt.append(time.monotonic() - t0)
    info: dict[str, Any] = {}
    for i, action in enumerate([*actions, actions[-1], actions[-1]]):  # the answer again if the episode goes on
        if stop.is_set():
            return
        t0 = time.monotonic()
        _, _, terminated, truncated, info = env.step(action)
        rec.step_t.append(t0)
        rec.step_dt.append(time.monotonic() - t0)
        rec.turns["answer" if i >= len(actions) - 1 else ("malformed" if k % 8 == 6 else "tool")] += 1
        if info.get("reward_status") == "infra_error":
            rec.error(classify_turn(info))
            return
        if terminated or truncated:
            break
    else:
        rec.error("episode did not end on its answer")
        return
    now = time.monotonic()
    rec.episode_t.append(now)
    if gold and "reward_outcome" in info:
        rec.gold.append((now, float(info["reward_outcome"])))


def client(ctx: Ctx, rec: Rec, stop: threading.Event, churn: bool) -> None:
    """Play episodes back to back on one session until ``stop`` (``churn``: a new session for each
    episode, closed after it). Every error is recorded, the session dropped and a new one opened."""
    rng = random.Random(rec.seed)
    env: RemoteEnv | None = None
    k = rec.seed
    try:
        while not stop.is_set():
            if env is None:
                env = open_session(ctx, rec, stop, rng)
                if env is None:
                    break
            try:
                play_episode(env, ctx, rec, k, stop, rng)
            except Exception as exc:
                rec.error(classify(exc))
                _close(env)
                env = None
                stop.wait(0.1)
            k += 1
            rec.ready.set()
            if churn:
                _close(env)
                env = None
    except BaseException as exc:  # reported by the run
        rec.error(f"client crashed: {type(exc).__name__}")
    finally:
        _close(env)
        rec.ready.set()
        rec.done.set()


class Burner:
    """One client stepping the env's burning tool call back to back while a B window is open."""

    def __init__(self, ctx: Ctx, action: str):
        self.ctx, self.action = ctx, action
        self.rec = Rec("burner", 999_983)
        self.env: RemoteEnv | None = None
        self._needs_reset = True
        self._rng = random.Random(7)

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                if self.env is None:
                    self.env = open_session(self.ctx, self.rec, stop, self._rng)
                    self._needs_reset = True
                    if self.env is None:
                        return
                try:
                    if self._needs_reset:
                        self.env.reset(seed=0, options={"task_id": self.ctx.tasks[0].id})
                        self._needs_reset = False
                    t0 = time.monotonic()
                    _, _, terminated, truncated, info = self.env.step(self.action)
                    self.rec.step_t.append(t0)
                    self.rec.step_dt.append(time.monotonic() - t0)
                    if info.get("reward_status") == "infra_error":
                        self.rec.error(classify_turn(info))
                    self._needs_reset = terminated or truncated or info.get("reward_status") == "infra_error"
                except Exception as exc:
                    self.rec.error(classify(exc))
                    _close(self.env)
                    self.env = None
                    stop.wait(0.1)
        except BaseException as exc:  # reported by the run
            self.rec.error(f"client crashed: {type(exc).__name__}")

    def close(self) -> None:
        _close(self.env)
        self.env = None


# --------------------------------------------------------------------------- figures
Window = tuple[float, float]


def join_all(threads: Sequence[threading.Thread], timeout_s: float) -> list[str]:
    """Join ``threads`` within one shared deadline; the names of those still running."""
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threads if t.is_alive()]


def _in(t: np.ndarray, windows: Sequence[Window]) -> np.ndarray:
    mask = np.zeros(len(t), dtype=bool)
    for a, b in windows:
        mask |= (t >= a) & (t < b)
    return mask


def _ms(values: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1e3, 1) if len(values) else None


def window_stats(recs: Sequence[Rec], windows: Sequence[Window]) -> dict[str, Any]:
    """Episodes, episodes/s and the reset and step latencies of ``recs`` inside ``windows``."""
    duration = sum(b - a for a, b in windows)
    out: dict[str, Any] = {"duration_s": round(duration, 1)}
    episodes = sum(int(_in(np.array(r.episode_t), windows).sum()) for r in recs if len(r.episode_t))
    out["episodes"] = episodes
    out["episodes_per_s"] = round(episodes / duration, 2) if duration > 0 else None
    for kind in ("reset", "step"):
        ts = [np.array(getattr(r, f"{kind}_t")) for r in recs if len(getattr(r, f"{kind}_t"))]
        ds = [np.array(getattr(r, f"{kind}_dt")) for r in recs if len(getattr(r, f"{kind}_dt"))]
        t = np.concatenate(ts) if ts else np.zeros(0)
        d = np.concatenate(ds)[_in(t, windows)] if ds else np.zeros(0)
        out[f"{kind}s"] = len(d)
        out[f"{kind}_p50_ms"], out[f"{kind}_p99_ms"] = _ms(d, 50), _ms(d, 99)
    return out


def _series(samples: list[dict[str, Any]], key: str, points: int = 16) -> list[Any]:
    """At most ``points`` evenly spaced values of ``key`` over the samples (the first and last included)."""
    if len(samples) <= points:
        return [s[key] for s in samples]
    idx = np.linspace(0, len(samples) - 1, points).round().astype(int)
    return [samples[i][key] for i in idx]


def conditions() -> dict[str, Any]:
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in ln),
        platform.processor() or "unknown CPU",
    )
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "machine": f"{cpu}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable here), {mem:.0f} GiB",
        "python": platform.python_version(),
        "sharing": (
            "clients and server on ONE machine: the client threads in this Python process (one GIL), prm-serve "
            "a subprocess with one worker process per session (and Code's sandboxes), on the same cores; other "
            "jobs on the machine are not stopped (see the load averages)"
        ),
    }


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


# --------------------------------------------------------------------------- one env
def run_env(env_id: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Warm-up, the load (A/B alternated with a burner where the env has one), overload; the figures."""
    kwargs: dict[str, Any] = {"num_tasks": NUM_TASKS}
    if args.tool_timeout_s and env_id in TOOL_DEADLINE:
        kwargs[TOOL_DEADLINE[env_id]] = args.tool_timeout_s
    max_sessions = args.max_sessions or args.clients + 4
    burn = BURN.get(env_id) if args.burn else None
    tasks = local_tasks(env_id, kwargs)
    load_before = _load()
    log = workdir / f"serve-{env_id.replace('/', '_')}.log"
    t_begin = time.monotonic()
    server = Server(env_id, kwargs, max_sessions, args.call_timeout_s, log)
    sampler: Sampler | None = None
    stop, surplus_stop = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    recs = [Rec("client", seed=i) for i in range(args.clients)]
    surplus: list[Rec] = []
    burner: Burner | None = None
    phases: list[tuple[str, float, float]] = []
    marks: dict[str, dict[str, Any]] = {}
    hung: list[str] = []
    result: dict[str, Any] = {"env": env_id}
    try:
        ctx = Ctx(server.url, server.token, env_id, tasks, args.request_timeout_s)
        probe = RemoteEnv(server.url, env_id=env_id, timeout_s=args.request_timeout_s, token=server.token)
        try:  # the gold data built here is for the tasks the server plays
            if sorted(probe.tasks.ids) != sorted(t.id for t in tasks):
                raise RuntimeError(f"{env_id}: the server's task ids differ from the ones built here")
        finally:
            probe.close()
        sampler = Sampler(server, args.sample_s, t_begin)
        for rec in recs:
            t = threading.Thread(target=client, args=(ctx, rec, stop, False), name=f"client-{rec.seed}", daemon=True)
            t.start()
            threads.append(t)
        t0 = time.monotonic()
        for rec in recs:  # every client has played an episode
            rec.ready.wait(max(0.01, t0 + args.ready_timeout_s - time.monotonic()))
        time.sleep(args.warmup_s)
        phases.append(("warmup", t0, time.monotonic()))
        marks["start"] = sampler.sample("start")
        load_s = args.minutes * 60
        if burn:
            burner = Burner(ctx, burn)
            for r in range(1, args.rounds + 1):
                sampler.phase = f"A{r}"
                a0 = time.monotonic()
                time.sleep(load_s / (2 * args.rounds))
                phases.append((f"A{r}", a0, time.monotonic()))
                sampler.phase = f"B{r}"
                first = len(burner.rec.step_t)
                bstop = threading.Event()
                bt = threading.Thread(target=burner.run, args=(bstop,), name="burner", daemon=True)
                bt.start()
                time.sleep(load_s / (2 * args.rounds))
                bstop.set()
                bt.join(args.request_timeout_s + 30)
                if bt.is_alive():
                    hung.append("burner")
                steps = list(zip(burner.rec.step_t[first:], burner.rec.step_dt[first:], strict=True))
                if steps:  # the window: from the first burning step's start to the last one's end
                    phases.append((f"B{r}", steps[0][0], steps[-1][0] + steps[-1][1]))
            burner.close()
        else:
            sampler.phase = "load"
            a0 = time.monotonic()
            time.sleep(load_s)
            phases.append(("load", a0, time.monotonic()))
        # overload: more clients than free sessions, each opening, playing one episode, closing
        sampler.phase = "overload"
        n_surplus = max(0, max_sessions - args.clients) + max(4, args.clients // 8)
        surplus = [Rec("surplus", seed=10_000 + i) for i in range(n_surplus)]
        sthreads = [
            threading.Thread(target=client, args=(ctx, r, surplus_stop, True), name=f"surplus-{r.seed}", daemon=True)
            for r in surplus
        ]
        o0 = time.monotonic()
        for t in sthreads:
            t.start()
        time.sleep(args.overload_s)
        surplus_stop.set()
        hung += join_all(sthreads, args.request_timeout_s + 30)
        phases.append(("overload", o0, time.monotonic()))
        marks["end"] = sampler.sample("end")
        sampler.phase = "closing"
    finally:
        stop.set()
        surplus_stop.set()
        hung += join_all(threads, args.request_timeout_s + 30)
        if burner is not None:
            burner.close()
        if sampler is not None:
            with contextlib.suppress(OSError, ValueError):
                marks["closed"] = sampler.sample("after every client closed its session")
            sampler.stop()
        result["stop"] = server.stop()
    result["load_average"] = {"before": load_before, "after": _load()}
    result |= analyse(env_id, args, max_sessions, kwargs, recs, surplus, burner, phases, marks, sampler, hung)
    result["server"] = {"pid": server.pid, "argv": server.argv, "log": str(log)}
    return result


def analyse(
    env_id: str,
    args: argparse.Namespace,
    max_sessions: int,
    kwargs: dict[str, Any],
    recs: list[Rec],
    surplus: list[Rec],
    burner: Burner | None,
    phases: list[tuple[str, float, float]],
    marks: dict[str, dict[str, Any]],
    sampler: Sampler | None,
    hung: list[str],
) -> dict[str, Any]:
    """The figures of one env's run (see the module docstring)."""
    by_name = {name: (a, b) for name, a, b in phases}
    base = [w for name, w in by_name.items() if name[0] == "A" or name == "load"]
    out: dict[str, Any] = {
        "clients": args.clients,
        "max_sessions": max_sessions,
        "env_kwargs": kwargs,
        "phases": {name: {"start_s": round(a - phases[0][1], 1), "s": round(b - a, 1)} for name, a, b in phases},
        "load": window_stats(recs, base),
        "per_phase": {name: window_stats(recs, [w]) for name, w in by_name.items()},
    }
    if base:  # no slow-down over time: the first half of the load against the second
        half = (len(base) + 1) // 2 if len(base) > 1 else 0
        if half:
            first, second = base[:half], base[half:]
        else:
            lo, hi = base[0]
            first, second = [(lo, (lo + hi) / 2)], [((lo + hi) / 2, hi)]
        out["first_half"], out["second_half"] = window_stats(recs, first), window_stats(recs, second)
    everyone = [*recs, *surplus, *([burner.rec] if burner else [])]
    errors = Counter(kind for r in everyone for _, kind in r.errors)
    out["errors"] = dict(errors.most_common())
    out["unacceptable_errors"] = {k: n for k, n in errors.items() if k != FULL}
    out["hung_threads"] = hung
    if hung:
        out["unacceptable_errors"]["threads still running at the end (hung)"] = len(hung)
    gold = [score for r in recs for _, score in r.gold]
    out["gold_answers"] = {"episodes": len(gold), "solved": sum(s >= 0.999 for s in gold)}
    turns: Counter[str] = Counter()
    for r in recs:
        turns.update(r.turns)
    out["turns"] = dict(turns)
    out["overload"] = {
        "surplus_clients": len(surplus),
        "free_sessions": max(0, max_sessions - args.clients),
        "refused_503": sum(kind == FULL for r in surplus for _, kind in r.errors),
        "sessions_opened": sum(r.opened for r in surplus),
        "episodes": sum(len(r.episode_t) for r in surplus),
        "backoff": BACKOFF,
        "other_errors": dict(Counter(k for r in surplus for _, k in r.errors if k != FULL)),
    }
    if burner is not None:
        a_windows = [w for name, w in by_name.items() if name[0] == "A"]
        b_windows = [w for name, w in by_name.items() if name[0] == "B"]
        a: dict[str, Any] = window_stats(recs, a_windows)
        b: dict[str, Any] = window_stats(recs, b_windows)
        rounds = [
            {
                "round": r,
                "A_step_p99_ms": window_stats(recs, [by_name[f"A{r}"]])["step_p99_ms"],
                "B_step_p99_ms": window_stats(recs, [by_name[f"B{r}"]])["step_p99_ms"] if f"B{r}" in by_name else None,
            }
            for r in range(1, args.rounds + 1)
        ]
        burns = np.array(burner.rec.step_dt) if len(burner.rec.step_dt) else np.zeros(0)
        ratio = (b["step_p99_ms"] / a["step_p99_ms"]) if a["step_p99_ms"] and b["step_p99_ms"] else None
        out["burn"] = {
            "action": BURN[env_id],
            "burner_steps": len(burns),
            "burner_step_median_s": round(float(np.median(burns)), 2) if len(burns) else None,
            "A": a,
            "B": b,
            "rounds": rounds,
            "p99_ratio_B_over_A": round(ratio, 2) if ratio else None,
            "p50_ratio_B_over_A": (
                round(b["step_p50_ms"] / a["step_p50_ms"], 2) if a["step_p50_ms"] and b["step_p50_ms"] else None
            ),
            "within_2x": ratio is not None and ratio <= 2.0,
        }
    samples = sampler.samples if sampler else []
    out["samples"] = samples
    measured = [s for s in samples if s["phase"] not in ("warmup", "closing") or s.get("mark") in ("start", "end")]
    out["server_figures"] = {
        key: {
            "start": marks.get("start", {}).get(key),
            "end": marks.get("end", {}).get(key),
            "min": min((s[key] for s in measured), default=None),
            "max": max((s[key] for s in measured), default=None),
            "after_clients_closed": marks.get("closed", {}).get(key),
        }
        for key in SERVER_KEYS
    }
    out["peak_sessions"] = max((s["sessions"] or 0 for s in samples), default=0)
    return out


# --------------------------------------------------------------------------- report
def _fmt(x: Any) -> str:
    return "-" if x is None else (f"{x:g}" if isinstance(x, float) else str(x))


def report(results: list[dict[str, Any]], cond: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"\nConditions: {cond['machine']}; Python {cond['python']}; {cond['sharing']}.")
    print(
        f"Each env: {args.clients} clients, {args.minutes:g} min of load after a warm-up, then {args.overload_s:g} s "
        f"of overload; per-request deadline {args.request_timeout_s:g} s, server --call-timeout-s "
        f"{args.call_timeout_s:g}; session refused: {BACKOFF}."
    )
    print("\n| env | episodes (no burner) | episodes/s | reset p50 / p99 ms | step p50 / p99 ms | errors by kind "
          "| server RSS MiB start -> end (min-max) | server fds start -> end (min-max) "
          "| load avg before -> after |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---|---|---|---|")
    for r in results:
        ld, sf = r["load"], r["server_figures"]
        errs = ", ".join(f"{k}: {n}" for k, n in r["errors"].items()) or "none"
        rss, fds = sf["rss_mib"], sf["fds"]
        print(
            f"| {r['env']} | {ld['episodes']} | {_fmt(ld['episodes_per_s'])} | {_fmt(ld['reset_p50_ms'])} / "
            f"{_fmt(ld['reset_p99_ms'])} | {_fmt(ld['step_p50_ms'])} / {_fmt(ld['step_p99_ms'])} | {errs} | "
            f"{_fmt(rss['start'])} -> {_fmt(rss['end'])} ({_fmt(rss['min'])}-{_fmt(rss['max'])}) | "
            f"{_fmt(fds['start'])} -> {_fmt(fds['end'])} ({_fmt(fds['min'])}-{_fmt(fds['max'])}) | "
            f"{r['load_average']['before']} -> {r['load_average']['after']} |"
        )
    burned = [r for r in results if "burn" in r]
    if burned:
        print("\nIsolation: the other clients' step latency without (A) and with (B) one client burning CPU in a tool:")
        print("\n| env | burning action | burner steps (median s) | step p99 A / B ms | p99 B/A | step p50 A / B ms "
              "| per round p99 A / B ms | within 2x |")  # fmt: skip
        print("|---|---|---:|---:|---:|---:|---|---|")
        for r in burned:
            b = r["burn"]
            per = "; ".join(f"{_fmt(x['A_step_p99_ms'])} / {_fmt(x['B_step_p99_ms'])}" for x in b["rounds"])
            what = "python `while True: pass`" if r["env"] == "prm/Code-v0" else "run_query, endless recursive CTE"
            print(
                f"| {r['env']} | {what} | {b['burner_steps']} ({_fmt(b['burner_step_median_s'])}) | "
                f"{_fmt(b['A']['step_p99_ms'])} / {_fmt(b['B']['step_p99_ms'])} | {_fmt(b['p99_ratio_B_over_A'])}x | "
                f"{_fmt(b['A']['step_p50_ms'])} / {_fmt(b['B']['step_p50_ms'])} | {per} | "
                f"{'yes' if b['within_2x'] else 'NO'} |"
            )
    print("\nOverload (503 past --max-sessions, clients back off and retry):")
    print("\n| env | max-sessions | free sessions | surplus clients | 503s | sessions opened | episodes "
          "| peak sessions (/health) | other errors |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        o = r["overload"]
        print(
            f"| {r['env']} | {r['max_sessions']} | {o['free_sessions']} | {o['surplus_clients']} | {o['refused_503']} "
            f"| {o['sessions_opened']} | {o['episodes']} | {r['peak_sessions']} | {o['other_errors'] or 'none'} |"
        )
    print("\nServer over time (evenly spaced samples; processes = env workers and sandboxes):")
    for r in results:
        s = r["samples"]
        print(f"  {r['env']}: {len(s)} samples every {args.sample_s:g} s")
        for key in SERVER_KEYS:
            print(f"    {key:<18} {' '.join(_fmt(v) for v in _series(s, key))}")
        st = r["stop"]
        gold = r["gold_answers"]
        print(
            f"    gold answers solved {gold['solved']}/{gold['episodes']}; turns {r['turns']}; server stopped by "
            f"{st['how']} in {st['stop_s']} s, exit {st['exit_code']}, {st['processes_at_stop']} processes at stop, "
            f"left behind {st['left_behind'] or 'none'}"
        )


def emit_results(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    for r in results:
        env, n = r["env"], args.clients
        first, second = r.get("first_half", {}), r.get("second_half", {})
        if first.get("episodes_per_s") and second.get("episodes_per_s"):
            emit("serve_load", f"{env} episodes/s, {n} remote clients, 2nd half of the load", second["episodes_per_s"],
                 first["episodes_per_s"], "the 1st half of the same run", "episodes/s", "higher")  # fmt: skip
        else:
            skipped("serve_load", f"{env} episodes/s, {n} remote clients", "1st half", "no episodes measured")
        sf = r["server_figures"]
        for key, unit in (("rss_mib", "MiB"), ("fds", "fds")):
            if sf[key]["start"] and sf[key]["end"]:
                emit("serve_load", f"{env} prm-serve {key.split('_')[0]} at the end, {n} clients",
                     sf[key]["end"], sf[key]["start"], "the same server after warm-up", unit, "lower",
                     f"{sf[key]['min']}-{sf[key]['max']}")  # fmt: skip
        b = r.get("burn")
        if b and b["A"]["step_p99_ms"] and b["B"]["step_p99_ms"]:
            emit("serve_load", f"{env} others' step p99 with one client burning CPU in a tool, {n} clients",
                 b["B"]["step_p99_ms"], b["A"]["step_p99_ms"], "the same load without the burner (A/B alternated)",
                 "ms", "lower", "; ".join(f"A {x['A_step_p99_ms']} B {x['B_step_p99_ms']}" for x in b["rounds"]),
                 note="target: B/A <= 2x, i.e. ratio >= 0.5")  # fmt: skip


# --------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--minutes", type=float, default=10.0, help="minutes of load per env (default %(default)s)")
    ap.add_argument("--clients", type=int, default=64, help="concurrent clients (default %(default)s)")
    ap.add_argument("--envs", default="math,sql,search,code", help="comma-separated: math, sql, search, code or ids")
    ap.add_argument(
        "--max-sessions",
        type=int,
        default=0,
        help="the server's --max-sessions (default: clients + 4); below --clients, the clients past it are "
        "refused (503) and back off until one of the others leaves (none does before the end)",
    )
    ap.add_argument("--burn", action=argparse.BooleanOptionalAction, default=True, help="A/B phases with a burner")
    ap.add_argument("--rounds", type=int, default=2, help="A/B alternations with the burner (default %(default)s)")
    ap.add_argument("--warmup-s", type=float, default=None, help="warm-up after every client's first episode")
    ap.add_argument("--overload-s", type=float, default=None, help="length of the overload phase")
    ap.add_argument("--sample-s", type=float, default=None, help="how often the server is sampled")
    ap.add_argument("--tool-timeout-s", type=float, default=None, help="the burning tools' deadline (env default)")
    ap.add_argument("--request-timeout-s", type=float, default=90.0, help="each RemoteEnv call's total deadline")
    ap.add_argument("--call-timeout-s", type=float, default=60.0, help="the server's --call-timeout-s")
    ap.add_argument("--ready-timeout-s", type=float, default=300.0, help="longest wait for every first episode")
    ap.add_argument("--json", default="", help="write every figure (samples included) to this file")
    args = ap.parse_args(argv)
    load_s = args.minutes * 60
    args.warmup_s = args.warmup_s if args.warmup_s is not None else min(30.0, max(2.0, 0.05 * load_s))
    args.overload_s = args.overload_s if args.overload_s is not None else min(60.0, max(5.0, 0.1 * load_s))
    args.sample_s = args.sample_s if args.sample_s is not None else min(10.0, max(0.5, load_s / 60))
    if args.clients < 1 or args.rounds < 1 or args.minutes <= 0:
        ap.error("--clients and --rounds must be >= 1 and --minutes > 0")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; every figure, as ``--json`` writes it."""
    args = parse_args(argv)
    wanted = [ENV_IDS.get(e.strip(), e.strip()) for e in args.envs.split(",") if e.strip()]
    unknown = [e for e in wanted if e not in ENV_IDS.values()]
    if unknown:
        raise SystemExit(f"unknown --envs {unknown}; choose from {', '.join(ENV_IDS)}")
    cond = conditions()
    print(f"Conditions: {cond['machine']}; {cond['sharing']}; load average {_load()}.", flush=True)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-serve-load-") as tmp:
        for env_id in wanted:
            print(f"{env_id}: {args.clients} clients, {args.minutes:g} min ...", flush=True)
            r = run_env(env_id, args, Path(tmp))
            ld = r["load"]
            print(
                f"{env_id}: {ld['episodes']} episodes, {_fmt(ld['episodes_per_s'])}/s, step p50/p99 "
                f"{_fmt(ld['step_p50_ms'])}/{_fmt(ld['step_p99_ms'])} ms, errors {r['errors'] or 'none'}",
                flush=True,
            )
            if r["unacceptable_errors"] or not r["stop"]["gone"]:
                print(f"{env_id}: server log tail:\n{Path(r['server']['log']).read_text()[-3000:]}", flush=True)
            results.append(r)
    out = {"conditions": cond, "args": vars(args), "envs": results}
    report(results, cond, args)
    emit_results(results, args)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}")
    return out


if __name__ == "__main__":
    figures = main()
    bad = [r["env"] for r in figures["envs"] if r["unacceptable_errors"] or not r["stop"]["gone"]]
    if bad:
        print(f"errors other than 503 past --max-sessions, or a server that did not stop cleanly: {bad}")
    raise SystemExit(1 if bad else 0)
