"""Faults during distributed training, nothing lost (issue 45, item 3).

Each fault is injected for real, with ``SIGKILL`` of the process that plays the episode:

* ``train-agent --backend ray``: the Ray rollout worker playing a group is killed mid-step; its
  group is retried on a new worker (counted in ``rollout/worker_deaths`` and
  ``rollout/retried_groups``) and trained once.
* ``train-agent --env-url``: the ``prm-serve`` env server is killed mid-step and restarted on the
  same port; the episodes it was playing come back ``infra_error``, are left out of the
  advantages (``excluded_trajectories``) and the run goes on.
* ``prm/SQL-v0`` on its throwaway PostgreSQL: the server is killed mid-episode; the next query is
  a clear ``infra_error`` and the next episode runs on a fresh server.

The first two stall the first training step of ``test/StallMath-v0`` (:mod:`tests.reliability.stall_env`)
so the kill lands inside a step, in the process that plays it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.training import trainer as trainer_module
from prm_gym.training.cli import main
from prm_gym.training.metrics import read_metrics
from tests.reliability.stall_env import ENV_ID, STALL_DIR, STALL_S

ROOT = Path(__file__).resolve().parents[2]
STEPS, TASKS, GROUP = 3, 2, 2


class Batches:
    """Records what every training step's batch holds: per trajectory its task, seed, and each
    turn's status and reward (a spy on the trainer's ``build_batch``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps: list[list[dict[str, Any]]] = []
        real = trainer_module.build_batch

        def spy(trajs: Any, grouping: Any, *args: Any, **kwargs: Any) -> Any:
            self.steps.append(
                [
                    {
                        "task": t.task_id,
                        "seed": t.seed,
                        "group": g,
                        "status": [turn.status for turn in t.turns],
                        "reward": [turn.reward for turn in t.turns],
                    }
                    for t, g in zip(trajs, grouping.groups, strict=True)
                ]
            )
            return real(trajs, grouping, *args, **kwargs)

        monkeypatch.setattr(trainer_module, "build_batch", spy)

    def check_no_duplicates(self) -> None:
        """Every step trained TASKS groups of GROUP episodes, each episode once."""
        assert len(self.steps) == STEPS
        for rows in self.steps:
            assert len(rows) == TASKS * GROUP
            assert len({(r["task"], r["seed"]) for r in rows}) == TASKS * GROUP
            assert sorted({r["group"] for r in rows}) == list(range(TASKS))

    def flagged(self) -> list[dict[str, Any]]:
        return [r for s in self.steps for r in s if "infra_error" in r["status"]]


def _argv(out: Path, *extra: str) -> list[str]:
    return [
        "--policy", "hf:tiny", "--env", ENV_ID, "--imports", "tests.reliability.stall_env",
        "--steps", str(STEPS), "--tasks-per-step", str(TASKS), "--group-size", str(GROUP),
        "--sampling.max-new-tokens", "8", "--eval.num-tasks", "1", "--eval.samples", "1",
        "--no-progress", "--no-tensorboard", "--checkpoint-every", "0", "--output-dir", str(out), *extra,
    ]  # fmt: skip


def _stalled_pid(where: Path, timeout_s: float) -> int:
    """The pid the stalled step wrote (it is sleeping in that step now)."""
    marker = where / "stalled"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = marker.read_text().strip() if marker.exists() else ""
        if text:
            return int(text)
        time.sleep(0.05)
    raise AssertionError(f"no step stalled within {timeout_s:g} s")


def _run_with(argv: list[str], fault: Any) -> tuple[int, list[BaseException]]:
    """``main(argv)`` in this thread while ``fault()`` runs in another; its errors are returned."""
    errors: list[BaseException] = []

    def inject() -> None:
        try:
            fault()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    t = threading.Thread(target=inject, daemon=True)
    t.start()
    rc = main(argv)
    t.join(timeout=60)
    return rc, errors


def _step_rows(out: Path) -> list[dict[str, Any]]:
    return [r for r in read_metrics(out) if "rollout_s" in r]


@pytest.fixture
def stall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = tmp_path / "stall"
    where.mkdir()
    monkeypatch.setenv(STALL_DIR, str(where))
    monkeypatch.setenv(STALL_S, "60")  # the kill comes long before
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    yield where


# --------------------------------------------------------------------------- (a) Ray worker
@pytest.mark.slow  # a local Ray cluster and a training run: ~40-90 s on the shared 2-core machine
def test_ray_worker_sigkilled_mid_group_is_retried_once(
    tmp_path: Path, stall: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("needs its own Ray cluster (the worker's environment carries the stall switch)")
    batches = Batches(monkeypatch)
    killed: list[int] = []

    def kill_worker() -> None:
        pid = _stalled_pid(stall, 300)
        assert pid != os.getpid()  # a Ray actor process, not the trainer
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    out = tmp_path / "run"
    rc, errors = _run_with(_argv(out, "--backend", "ray", "--num-workers", "1"), kill_worker)
    assert rc == 0 and not errors and len(killed) == 1
    rows = _step_rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    deaths = sum(r["rollout/worker_deaths"] for r in rows)
    retried = sum(r["rollout/retried_groups"] for r in rows)
    dropped = sum(r["rollout/dropped_groups"] for r in rows)
    assert deaths == 1 and retried == 1 and dropped == 0
    batches.check_no_duplicates()  # the retried group was trained once, whole
    assert all(r["trained_rows"] + r.get("excluded_trajectories", 0) == TASKS * GROUP for r in rows)
    # the killed group's episodes never reached the trainer; its replay was played whole and scored
    assert not batches.flagged()
    print(
        f"\nray worker SIGKILL: injected 1 (pid {killed[0]}), worker_deaths {deaths:.0f}, retried_groups "
        f"{retried:.0f}, dropped_groups {dropped:.0f}, trained groups per step "
        f"{[len({r['group'] for r in s}) for s in batches.steps]}, steps {len(rows)}/{STEPS}"
    )


# --------------------------------------------------------------------------- (b) env server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(port: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "prm_gym.envs.serve.cli", "--env", ENV_ID, "--port", str(port)]
    cmd += ["--imports", "tests.reliability.stall_env", "--call-timeout-s", "120"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"prm-serve exited: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("prm-serve did not start within 120 s")


def _kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and its descendants (the server and its env worker processes), as a lost machine would."""
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=10)
    return [p.pid for p in procs]


@pytest.mark.slow  # two server starts and a training run: ~40-80 s on the shared 2-core machine
def test_env_server_killed_mid_step_and_restarted(tmp_path: Path, stall: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batches = Batches(monkeypatch)
    port, log = _free_port(), tmp_path / "serve.log"
    servers = [_serve(port, log)]
    killed: list[int] = []

    def kill_and_restart() -> None:
        pid = _stalled_pid(stall, 300)  # an env worker process of the server, inside step()
        assert pid in {c.pid for c in psutil.Process(servers[0].pid).children(recursive=True)}
        killed.extend(_kill_tree(servers[0].pid))
        servers.append(_serve(port, log))  # the same address: the clients' next calls reach the new server

    out = tmp_path / "run"
    try:
        rc, errors = _run_with(_argv(out, "--env-url", f"http://127.0.0.1:{port}"), kill_and_restart)
    finally:
        for s in servers:
            if s.poll() is None:
                _kill_tree(s.pid)
    assert rc == 0 and not errors and killed
    rows = _step_rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    batches.check_no_duplicates()
    flagged = batches.flagged()
    # the group whose step was cut: every episode of it on the dead server is flagged, none scored
    hit = [r for r in flagged if r["task"] == flagged[0]["task"]] if flagged else []
    assert len(hit) == GROUP and all(r["status"][-1] == "infra_error" and r["reward"][-1] == 0.0 for r in hit)
    excluded = sum(r.get("excluded_trajectories", 0) for r in rows)
    infra_turns = sum(r.get("infra_error_turns", 0) for r in rows)
    assert excluded == len(flagged) and infra_turns == sum(r["status"].count("infra_error") for r in flagged)
    # nothing from the killed step was scored as the agent's: every turn of those episodes is ok
    # before the cut and infra_error at it (no reward-0 "ok" turn stands in for the failure)
    assert all(r["status"].count("infra_error") == 1 and r["status"][-1] == "infra_error" for r in flagged)
    print(
        f"\nenv server SIGKILL mid-step + restart: injected 1 (processes {len(killed)}), episodes flagged "
        f"{len(flagged)} (infra_error_turns {infra_turns:.0f}, excluded_trajectories {excluded:.0f}), "
        f"scored against the agent 0, steps {len(rows)}/{STEPS}"
    )


# --------------------------------------------------------------------------- (c) PostgreSQL
SQL_TOOL = '<tool_call>{"name": "run_query", "arguments": {"sql": "SELECT 1"}}</tool_call>'


@pytest.mark.slow  # two PostgreSQL starts (initdb + restart): ~10-25 s on the shared 2-core machine
def test_postgres_killed_mid_episode_is_infra_error_and_the_next_episode_gets_a_fresh_server() -> None:
    pytest.importorskip("psycopg")
    import gymnasium as gym

    from prm_gym.envs.sql.pgserver import find_pg_bin, process_gone

    try:
        find_pg_bin()
    except ConfigError as exc:
        pytest.skip(f"no PostgreSQL server programs: {exc}")
    env = gym.make("prm/SQL-v0", backend="postgres", num_tasks=3, max_turns=4)
    try:
        server = env.unwrapped._pg.server  # type: ignore[attr-defined]
        pin = {"task_id": env.unwrapped.tasks.ids[0]}  # type: ignore[attr-defined]
        env.reset(seed=0, options=pin)  # a first episode: the judges open their connections
        gold = env.unwrapped.task.answer  # type: ignore[attr-defined]
        _, reward, _, _, info = env.step(f"<answer>{gold}</answer>")
        assert info["reward_status"] == "ok" and info["reward_outcome"] == 1.0
        env.reset(seed=1, options=pin)
        _, _, _, _, info = env.step(SQL_TOOL)
        assert info["reward_status"] == "ok" and info["tool"]["ok"]
        old = server.pid
        os.kill(old, signal.SIGKILL)  # the postmaster, mid-episode
        deadline = time.monotonic() + 10
        while not process_gone(old) and time.monotonic() < deadline:
            time.sleep(0.05)
        obs, reward, _, _, info = env.step(SQL_TOOL)
        assert info["reward_status"] == "infra_error" and reward == 0.0
        problem = " ".join(obs.split())
        assert "PostgreSQL" in problem, problem  # says what failed
        env.reset(seed=2, options=pin)  # the next episode: a fresh server process on the same socket
        new = server.pid
        assert new not in (None, old) and not process_gone(new)
        _, _, _, _, info = env.step(SQL_TOOL)
        assert info["reward_status"] == "ok" and info["tool"]["ok"]
        # a query the judges have not cached, on their connections from before the kill
        _, reward, terminated, _, info = env.step(f"<answer>{gold} -- again</answer>")
        assert terminated and info["reward_status"] == "ok" and info["reward_outcome"] == 1.0, info
    finally:
        env.close()
    print(
        f"\npostgres SIGKILL mid-episode: injected 1 (postmaster {old}), flagged 1 turn infra_error "
        f"({problem[:160]!r}), next episode on a fresh server (pid {new}), right answer scored 1.0"
    )
