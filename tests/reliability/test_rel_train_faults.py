"""A real training run whose process judge fails at a set rate: the run continues and counts them.

The judge is a fake (:class:`prm_gym.rewards.testing.FakeJudge`) raising ``JudgeError`` at a seeded
rate, so that every turn is judged whatever the tiny random model writes (``llm/turn`` leaves the
turns the parser rejected unjudged, and the tiny model's turns are all of that kind). What an LLM
judge turns into ``JudgeError`` and what it scores is tested against a real HTTP endpoint in
``test_rel_faults.py`` and ``tests/rewards/test_llm_judge.py``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from prm_gym.core.errors import JudgeError
from prm_gym.rewards.registry import register_judge
from prm_gym.rewards.testing import FakeJudge
from prm_gym.rewards.types import Turn
from prm_gym.training.cli import main
from prm_gym.training.metrics import read_metrics


class FlakyVerdicts:
    """0.5 for a turn, or at ``rate`` (seeded) a JudgeError (the judge's service failed), counted."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.rng = np.random.default_rng(seed)
        self.calls = self.injected = 0
        self.lock = threading.Lock()

    def __call__(self, turn: Turn) -> float:
        with self.lock:
            self.calls += 1
            if self.rng.random() >= self.rate:
                return 0.5
            self.injected += 1
        raise JudgeError("judge service unavailable (injected)")


def _train(tmp_path: Path, steps: int) -> list[dict[str, float]]:
    argv = [
        "--policy", "hf:tiny", "--steps", str(steps), "--group-size", "2", "--tasks-per-step", "2",
        "--sampling.max-new-tokens", "12", "--eval.num-tasks", "1", "--eval.samples", "1",
        "--no-progress", "--no-tensorboard", "--output-dir", str(tmp_path / "run"),
        "--judge", "rule/math_equiv + 0.1*rule/format + test/flaky",
        "--env-kwargs", json.dumps({"max_turns": 2}),
        "--eval.env-kwargs", json.dumps({"split": "test", "judge": "rule/math_equiv"}),
    ]  # fmt: skip
    assert main(argv) == 0
    return [r for r in read_metrics(tmp_path / "run") if "reward" in r]


@pytest.mark.slow  # a real training run: ~20-60 s on the shared 2-core machine
def test_training_survives_judge_faults_and_counts_them(tmp_path: Path) -> None:
    faults = FlakyVerdicts(rate=0.3, seed=1)
    register_judge("test/flaky", lambda **_: FakeJudge("test/flaky", faults), overwrite=True)
    rows = _train(tmp_path, steps=2)
    assert [r["step"] for r in rows] == [1, 2]
    flagged = sum(r["infra_error_turns"] for r in rows)
    assert faults.injected > 0 and faults.calls > faults.injected
    assert flagged == faults.injected  # one flagged turn per failed verdict, none lost, none extra
    assert sum(r["excluded_trajectories"] for r in rows) >= 1
    assert all(np.isfinite(r["loss"]) for r in rows)
    print(f"\ntraining judge faults: {faults.calls} verdicts, {faults.injected} failed, {flagged:.0f} turns flagged")
