"""A real training run whose LLM judge fails at a set rate: the run continues and counts them."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from prm_gym.rewards.openai_fake import FakeOpenAIServer
from prm_gym.training.cli import main
from prm_gym.training.metrics import read_metrics


class FaultyReplies:
    """Judge replies that are garbage, non-finite or HTTP 500 at ``rate`` (seeded), counted."""

    def __init__(self, server: FakeOpenAIServer, rate: float, seed: int) -> None:
        self.server, self.rate = server, rate
        self.rng = np.random.default_rng(seed)
        self.injected = 0
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, messages: list[dict[str, object]]) -> str:
        with self.lock:
            self.calls += 1
            if self.rng.random() >= self.rate:
                return '{"score": 5, "reason": "ok"}'
            self.injected += 1
            kind = int(self.rng.integers(3))
        return ["I think it is fine", '{"score": NaN}', '{"score": -3}'][kind]


def _train(tmp_path: Path, base_url: str, steps: int, extra: list[str] | None = None) -> list[dict[str, float]]:
    judge_kwargs = {"llm/turn": {"base_url": base_url, "max_retries": 0, "cache_size": 0, "guards": False}}
    argv = [
        "--policy", "hf:tiny", "--steps", str(steps), "--group-size", "2", "--tasks-per-step", "2",
        "--sampling.max-new-tokens", "12", "--eval.num-tasks", "1", "--eval.samples", "1",
        "--no-progress", "--no-tensorboard", "--output-dir", str(tmp_path / "run"),
        "--judge", "rule/math_equiv + 0.1*rule/format + llm/turn",
        "--env-kwargs", json.dumps({"judge_kwargs": judge_kwargs, "max_turns": 2}),
        "--eval.env-kwargs", json.dumps({"split": "test", "judge": "rule/math_equiv"}),
        *(extra or []),
    ]  # fmt: skip
    assert main(argv) == 0
    return [r for r in read_metrics(tmp_path / "run") if "reward" in r]


@pytest.mark.slow  # a real training run: ~20-60 s on the shared 2-core machine
def test_training_survives_judge_faults_and_counts_them(tmp_path: Path) -> None:
    server = FakeOpenAIServer().start()
    faults = FaultyReplies(server, rate=0.3, seed=1)
    server.reply = faults
    try:
        rows = _train(tmp_path, server.base_url, steps=2)
    finally:
        server.close()
    assert [r["step"] for r in rows] == [1, 2]
    flagged = sum(r["infra_error_turns"] for r in rows)
    assert faults.injected > 0 and faults.calls > faults.injected
    assert flagged == faults.injected
    assert sum(r["excluded_trajectories"] for r in rows) >= 1
    assert all(np.isfinite(r["loss"]) for r in rows)
    print(
        f"\ntraining judge faults: {faults.calls} judge calls, {faults.injected} injected, {flagged:.0f} turns flagged"
    )
