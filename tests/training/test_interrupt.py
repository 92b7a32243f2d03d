"""Ctrl-C on train-agent: a clean exit (130), no traceback, nothing left in its temp dir, and
the checkpoint it had written still loads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from prm_gym.training.checkpoint import CHECKPOINT, load_checkpoint


def test_ctrl_c_exits_cleanly_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    tmp, run = tmp_path / "tmp", tmp_path / "run"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    argv = [
        sys.executable,
        "-m",
        "prm_gym.training.cli",
        "--env",
        "prm/Math-v0",
        "--policy",
        "hf:tiny",
        "--steps",
        "500",
        "--group-size",
        "2",
        "--tasks-per-step",
        "1",
        "--checkpoint-every",
        "1",
        "--output-dir",
        str(run),
        "--no-progress",
        "--sampling.max-new-tokens",
        "8",
        "--eval.num-tasks",
        "1",
        "--eval.samples",
        "1",
    ]
    # A terminal delivers SIGINT to a process that handles it; test runners (pytest-xdist) may start
    # workers with SIGINT ignored, which children inherit, so restore the default in the child.
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 240
    while not (run / CHECKPOINT).exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    try:
        assert (run / CHECKPOINT).exists(), "no checkpoint was written before the deadline"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted; resume with --resume" in err and "Traceback" not in err
    assert sorted(os.listdir(tmp)) == [], "temporary files left behind"
    assert load_checkpoint(str(run / CHECKPOINT))["step"] >= 1
