"""Crash safety of ``train-agent``: kill -9 at random points and ``--resume``; Ctrl-C cleans up.

The trainer runs as a real subprocess (``python -m prm_gym.training.cli``) and is killed with real
signals. A resumed run must end with every step logged exactly once, a loadable checkpoint,
no leftover temporary files, and the same per-step metrics as an uninterrupted run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from prm_gym.training.checkpoint import load_checkpoint
from prm_gym.training.metrics import read_metrics

PROJECT = Path(__file__).resolve().parents[2]
STEPS = 8
KILLS = 3
pytestmark = pytest.mark.slow


def _argv(out: Path, resume: bool) -> list[str]:
    return [
        sys.executable, "-m", "prm_gym.training.cli", "--policy", "hf:tiny", "--steps", str(STEPS),
        "--group-size", "2", "--tasks-per-step", "1", "--sampling.max-new-tokens", "12",
        "--eval.num-tasks", "1", "--eval.samples", "1", "--checkpoint-every", "1",
        "--no-progress", "--no-tensorboard", "--output-dir", str(out), *(["--resume"] if resume else []),
    ]  # fmt: skip


def _run(out: Path, resume: bool, kill_at: tuple[int, float] | None, sig: int = signal.SIGKILL) -> int:
    """Run the trainer; with ``kill_at=(step, delay)`` send ``sig`` ``delay`` s after ``step`` is logged."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen(_argv(out, resume), cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if kill_at is not None:
        step, delay = kill_at
        while proc.poll() is None and not any(r["step"] >= step for r in _rows_now(out)):
            time.sleep(0.05)
        time.sleep(delay)  # lands anywhere in the next step: mid-rollout, mid-learn, mid-checkpoint
        if proc.poll() is None:
            proc.send_signal(sig)
    proc.wait(timeout=600)
    return proc.returncode


def _rows_now(out: Path) -> list[dict[str, float]]:
    try:
        return _train_rows(out)
    except (OSError, ValueError):
        return []


def _train_rows(out: Path) -> list[dict[str, float]]:
    return [r for r in read_metrics(out) if "reward" in r]


@pytest.mark.timeout(900)
def test_kill_9_at_random_points_then_resume(tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    assert _run(ref, False, None) == 0
    rng = np.random.default_rng(7)
    out, kills, done = tmp_path / "crashy", 0, 0
    for _ in range(KILLS):
        resume = (out / "checkpoint.pt").exists()
        logged = max((int(r["step"]) for r in _rows_now(out)), default=0)
        target = logged + int(rng.integers(1, 3))  # a step this run itself must log first
        if target >= STEPS:
            break
        rc = _run(out, resume, (target, float(rng.uniform(0.0, 0.5))))
        if rc == 0:
            break
        assert rc == -signal.SIGKILL
        kills += 1
        if (out / "checkpoint.pt").exists():
            done = int(load_checkpoint(out)["step"])  # never corrupt
        print(f"\nkill -9 #{kills}: after step {target} was logged; checkpoint at step {done}", end="")
    ckpt = out / "checkpoint.pt"
    if not ckpt.exists() or int(load_checkpoint(out)["step"]) < STEPS or _train_rows(out)[-1]["step"] < STEPS:
        assert _run(out, ckpt.exists(), None) == 0
    assert kills >= 1
    rows, want = _train_rows(out), _train_rows(ref)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # nothing lost, nothing repeated
    for a, b in zip(rows, want, strict=True):
        assert a["reward"] == pytest.approx(b["reward"]) and a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    assert int(load_checkpoint(out)["step"]) == STEPS
    assert not list(out.glob(".ckpt-*")), "a temporary checkpoint file was left behind"


def test_ctrl_c_cleans_up_sandboxes_and_temp_files(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = (
        "import os, time\n"
        "from prm_gym.envs.code.env import CodeEnv\n"
        "env = CodeEnv(num_tasks=3)\n"
        "env.reset(seed=0)\n"
        "try:\n"
        '    env.step(\'<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>\')\n'
        "    print('READY', flush=True)\n"
        "    time.sleep(60)\n"
        "finally:\n"
        "    env.close()\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    children = _descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    time.sleep(0.5)
    alive = [p for p in children if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
    assert children  # there was something to clean up
    assert alive == [] and list(tmp.iterdir()) == []


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _ppid(int(entry.name)) == pid:
            out += [int(entry.name), *_descendants(int(entry.name))]
    return out


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"
