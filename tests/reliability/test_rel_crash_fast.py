"""What a kill -9 leaves behind (a torn metrics line, an orphan temporary checkpoint, a checkpoint
written while the process dies) does not break ``--resume``. The long kill/resume runs are in
``test_rel_crash_long.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from prm_gym.training.checkpoint import load_checkpoint, save_checkpoint
from prm_gym.training.metrics import MetricsLog, read_metrics

PROJECT = Path(__file__).resolve().parents[2]


def test_torn_last_metrics_line_is_dropped_on_resume(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path)
    for step in (1, 2, 3):
        log.log(step, {"reward": float(step)})
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 4, "rew')  # the process died mid-append
    resumed = MetricsLog(tmp_path, keep_until=2)
    resumed.log(3, {"reward": 3.5})
    assert [(r["step"], r["reward"]) for r in read_metrics(tmp_path)] == [(1, 1.0), (2, 2.0), (3, 3.5)]
    assert not list(tmp_path.glob("*.tmp"))


def test_orphan_temporary_checkpoint_is_removed_by_the_next_save(tmp_path: Path) -> None:
    orphan = tmp_path / ".ckpt-dead.tmp"
    orphan.write_bytes(b"half a checkpoint")
    save_checkpoint(tmp_path, {"step": 3, "w": torch.ones(2)})
    assert not orphan.exists() and load_checkpoint(tmp_path)["step"] == 3


def test_kill_9_during_checkpoint_writes_never_corrupts_it(tmp_path: Path) -> None:
    code = (
        "import sys, torch\n"
        "from prm_gym.training.checkpoint import save_checkpoint\n"
        "big = torch.zeros(1_000_000)\n"
        "step = 0\n"
        "while True:\n"
        "    step += 1\n"
        "    save_checkpoint(sys.argv[1], {'step': step, 'w': big + step})\n"
        "    if step == 2: print('SAVED', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=PROJECT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "SAVED"
    for _ in range(5):
        os.kill(proc.pid, signal.SIGSTOP)  # freeze wherever it is (often inside torch.save)
        state = load_checkpoint(tmp_path)
        assert float(state["w"][0]) == state["step"]
        os.kill(proc.pid, signal.SIGCONT)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    state = load_checkpoint(tmp_path)
    assert float(state["w"][-1]) == state["step"] >= 2
    save_checkpoint(tmp_path, {"step": state["step"] + 1})  # the resumed run's first save
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
