"""One loop for every backend: the same seeded config through the in-process source, Ray with one
worker and a (fake) vLLM server writes the same metric keys, runs eval on schedule and draws the
same plots; the synchronous in-process and Ray runs train on the same rewards, step by step."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from prm_gym.agents.vllm_fake import FakeVLLMServer
from prm_gym.core.models import tiny_model, tiny_tokenizer
from prm_gym.training.config import EvalConfig
from prm_gym.training.metrics import read_metrics
from prm_gym.training.trainer import train
from tests.training.test_trainer import small

pytestmark = pytest.mark.xdist_group("ray")  # one Ray cluster per xdist worker (make test: --dist loadgroup)

PLOTS = ("reward.png", "staleness.png")


def run(out: Path, **changes: Any) -> list[dict[str, Any]]:
    cfg = small(out, steps=2, tasks_per_step=2, eval=EvalConfig(num_tasks=2, samples=1, every=1), **changes)
    train(cfg)
    return read_metrics(out)


def step_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if "loss" in r]


def eval_steps(rows: list[dict[str, Any]]) -> list[int]:
    return [int(r["step"]) for r in rows if "eval/success" in r]


def test_local_and_ray_runs_are_the_same_run(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    local = run(tmp_path / "local")
    remote = run(tmp_path / "ray", backend="ray", num_workers=1)
    a, b = step_rows(local), step_rows(remote)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2]
    assert [set(r) for r in a] == [set(r) for r in b]
    for key in ("reward", "generated_tokens", "loss", "trained_rows"):
        assert [r[key] for r in a] == pytest.approx([r[key] for r in b], abs=1e-6), key
    assert eval_steps(local) == eval_steps(remote) == [0, 1, 2]
    for name in PLOTS:
        assert (tmp_path / "local" / name).stat().st_size > 0 and (tmp_path / "ray" / name).stat().st_size > 0


def test_a_vllm_server_run_logs_what_a_local_run_logs(tmp_path: Path) -> None:
    tok = tiny_tokenizer()
    weights = tmp_path / "served"
    tiny_model(len(tok), seed=0).save_pretrained(weights)
    tok.save_pretrained(weights)
    answer = [*tok.encode("<answer>7</answer>", add_special_tokens=False), tok.eos_token_id]
    local = run(tmp_path / "local")
    with FakeVLLMServer(reply=lambda p, r: answer, model=str(weights)) as server:
        served = run(tmp_path / "vllm", policy=f"vllm:{server.base_url}", vllm_weights=f"hf:{weights}")
    assert server.reloads == 2
    a, b = step_rows(local), step_rows(served)
    assert [set(r) for r in a] == [set(r) for r in b]
    assert eval_steps(served) == [0, 1, 2]
    assert all((tmp_path / "vllm" / name).stat().st_size > 0 for name in PLOTS)


def test_resumed_run_matches_an_uninterrupted_one_on_ray(tmp_path: Path) -> None:
    """The sampler is reseeded per group, so nothing but the weights carries over a resume."""
    pytest.importorskip("ray")
    full = step_rows(run(tmp_path / "full", backend="ray", num_workers=1))
    part = tmp_path / "part"
    cfg = small(part, steps=1, tasks_per_step=2, backend="ray", num_workers=1, eval=EvalConfig(num_tasks=1))
    train(cfg)
    train(dataclasses.replace(cfg, steps=2, resume=True))
    resumed = step_rows(read_metrics(part))
    assert [r["reward"] for r in resumed] == pytest.approx([r["reward"] for r in full], abs=1e-6)
