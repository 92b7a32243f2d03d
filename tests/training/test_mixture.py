"""Mixed-env runs: one train-agent run over weighted envs (issue #22, item 3)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.errors import ConfigError
from prm_gym.core.models import tiny_tokenizer
from prm_gym.core.policy import FakePolicy
from prm_gym.training.cli import merge_repeated, parse
from prm_gym.training.collect import StepCollector, make_tracker, step_tasks
from prm_gym.training.config import EvalConfig, RecipeConfig, TrainConfig
from prm_gym.training.metrics import read_metrics
from prm_gym.training.run import Run, probe_envs
from prm_gym.training.sources import LocalRollouts, worker_spec
from prm_gym.training.trainer import train
from tests.training.test_trainer import small

MATH, SQL = "prm/Math-v0", "prm/SQL-v0"
MIX_KW = '{"num_tasks": 12, "max_turns": 1, "prm/Math-v0": {"levels": [1]}, "prm/SQL-v0": {"levels": [1]}}'


def mixed(out: Path, **kw: object) -> TrainConfig:
    base: dict[str, object] = dict(
        env=(f"{MATH}:0.5", f"{SQL}:0.5"),
        env_kwargs=MIX_KW,
        tasks_per_step=2,
        eval=EvalConfig(num_tasks=1, samples=1, every=1),
    )
    base.update(kw)
    return small(out, **base)


def test_env_flag_takes_one_env_or_a_weighted_list() -> None:
    assert merge_repeated(["--steps", "2", "--env", "a/b:3", "--env=c/d:1", "--lr", "1"], "--env") == [
        "--steps",
        "2",
        "--env",
        "a/b:3",
        "c/d:1",
        "--lr",
        "1",
    ]
    one = parse(["--env", MATH])
    assert one.env == MATH and [(s.env_id, s.weight) for s in one.env_shares] == [(MATH, 1.0)]
    cfg = parse(["--env", f"{MATH}:0.5", "--env", f"{SQL}:0.3", "--env", "prm/Search-v0:0.2"])
    assert [(s.env_id, round(s.weight, 9)) for s in cfg.env_shares] == [(MATH, 0.5), (SQL, 0.3), ("prm/Search-v0", 0.2)]
    equal = TrainConfig(env=(MATH, SQL))  # a Python config: no weights, equal shares
    assert [s.weight for s in equal.env_shares] == [0.5, 0.5]
    assert [s.weight for s in TrainConfig(env=(f"{MATH}:3", f"{SQL}:1")).env_shares] == [0.75, 0.25]
    assert TrainConfig(env="prm_gym:prm/Math-v0").env_ids == ("prm_gym:prm/Math-v0",)  # a module prefix is no weight


@pytest.mark.parametrize(
    ("env", "kwargs", "match"),
    [
        ((f"{MATH}:0.5", SQL), "", "every env a weight .* or none"),
        ((f"{MATH}:0", SQL), "", "positive number"),
        ((MATH, MATH), "", "twice"),
        ((MATH, "Math"), "", "registered id"),
        ((MATH, SQL), '{"prm/Search-v0": {"k": 1}}', "names no env of this run"),
        ((MATH, SQL), '{"prm/SQL-v0": 3}', "JSON object"),
    ],
)
def test_a_bad_mixture_is_refused_naming_the_fix(env: tuple[str, ...], kwargs: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TrainConfig(env=env, env_kwargs=kwargs)


def test_an_env_server_run_takes_one_env() -> None:
    with pytest.raises(ConfigError, match=r"env_url.*serves one env"):
        TrainConfig(env=(MATH, SQL), env_url="http://localhost:8000")


def test_per_env_kwargs_lie_over_the_shared_ones() -> None:
    cfg = TrainConfig(env=(MATH, SQL), env_kwargs=MIX_KW, judge="rule/exact_match")
    assert cfg.env_kwargs_for(MATH) == {"num_tasks": 12, "max_turns": 1, "levels": [1], "judge": "rule/exact_match"}
    assert cfg.eval_env_kwargs_for(SQL)["split"] == "test" and cfg.eval_env_kwargs_for(SQL)["levels"] == [1]
    spec = worker_spec(cfg)
    assert (spec.env_id, set(spec.more_envs)) == (MATH, {SQL})


def test_draws_follow_the_weights_and_replay_the_same_for_a_step() -> None:
    cfg = TrainConfig(env=(f"{MATH}:0.7", f"{SQL}:0.2", "prm/Code-v0:0.1"), tasks_per_step=4, seed=3)
    ids = {MATH: [f"m{i}" for i in range(50)], SQL: [f"s{i}" for i in range(30)], "prm/Code-v0": ["c0", "c1"]}
    picks = [p for step in range(2000) for p in step_tasks(cfg, ids, step, 4)]
    counts = Counter(env for env, _, _ in picks)
    n = len(picks)
    for env, w in ((MATH, 0.7), (SQL, 0.2), ("prm/Code-v0", 0.1)):
        assert abs(counts[env] / n - w) < 4 * (w * (1 - w) / n) ** 0.5, (env, counts[env] / n)
    assert all(task in ids[env] for env, task, _ in picks)  # every task is drawn from its own env
    assert step_tasks(cfg, ids, 17, 4) == step_tasks(cfg, ids, 17, 4)  # a resumed run draws the same tasks
    assert step_tasks(cfg, ids, 17, 4) != step_tasks(cfg, ids, 18, 4)


def test_a_single_env_draws_what_it_drew_before_mixtures() -> None:
    """Old runs stay reproducible: one env consumes the step's generator exactly as before."""
    cfg = TrainConfig(seed=5)
    ids = [f"t{i}" for i in range(40)]
    for step in range(20):
        rng = np.random.default_rng([cfg.seed, step])
        old = [(ids[int(p)], int(rng.integers(2**31 - 1))) for p in rng.choice(40, size=3, replace=False)]
        assert [(t, s) for _, t, s in step_tasks(cfg, {MATH: ids}, step, 3)] == old


@pytest.mark.parametrize("curriculum", [False, True])
def test_a_group_is_always_one_task_of_one_env(tmp_path: Path, curriculum: bool) -> None:
    cfg = mixed(tmp_path, tasks_per_step=3, group_size=3, recipes=RecipeConfig(curriculum=curriculum))
    tok = tiny_tokenizer()
    makers, train_ids, _ = probe_envs(cfg, ChatTemplate(tok))
    source = LocalRollouts(worker_spec(cfg), [FakePolicy(tok, ["<answer>4</answer>"])])
    tracker = make_tracker(cfg, Run(cfg, None, None, None, None, makers, train_ids))  # type: ignore[arg-type]
    assert (tracker is not None) == curriculum
    collector = StepCollector(cfg, source, train_ids, tracker)
    seen: Counter[str] = Counter()
    try:
        for step in range(8):
            for unit in collector(step).units:
                trajs = unit.leaves
                assert len({t.env_id for t in trajs}) == 1 and len({t.task_id for t in trajs}) == 1
                assert len(trajs) == 3 and trajs[0].task_id in train_ids[trajs[0].env_id]
                seen[trajs[0].env_id] += 1
    finally:
        source.close()
    assert set(seen) == {MATH, SQL}
    assert len({t for ids in train_ids.values() for t in ids}) == sum(len(v) for v in train_ids.values())


def test_a_mixed_run_logs_evaluates_and_plots_per_env(tmp_path: Path) -> None:
    train(mixed(tmp_path, steps=2))
    rows = read_metrics(tmp_path)
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == 2
    for r in steps:
        assert r[f"episodes/env={MATH}"] + r[f"episodes/env={SQL}"] == 4  # 2 tasks x 2 episodes
        for env in (MATH, SQL):
            if r[f"episodes/env={env}"]:
                assert {f"reward/env={env}", f"success/env={env}"} <= set(r)
    evals = [r for r in rows if "eval/success" in r]
    assert [r["step"] for r in evals] == [0, 1, 2]
    for env in (MATH, SQL):
        assert all(f"eval/success/env={env}" in r and f"eval/pass@1/env={env}" in r for r in evals)
    assert all(r["eval/tasks_scored"] == 2 for r in evals)  # one held-out task of each env
    assert (tmp_path / "envs.png").stat().st_size > 0 and (tmp_path / "reward.png").stat().st_size > 0


def test_a_resumed_mixed_run_matches_an_uninterrupted_one(tmp_path: Path) -> None:
    full = train(mixed(tmp_path / "full", steps=2, eval=EvalConfig(num_tasks=1, samples=1)))
    cfg = mixed(tmp_path / "part", steps=1, eval=EvalConfig(num_tasks=1, samples=1))
    train(cfg)
    resumed = train(dataclasses.replace(cfg, steps=2, resume=True))
    for a, b in zip(full.policy.model.parameters(), resumed.policy.model.parameters(), strict=True):
        assert torch.equal(a, b)
    keys = ("reward", f"episodes/env={MATH}", f"episodes/env={SQL}", "generated_tokens")
    want = [[r.get(k) for k in keys] for r in read_metrics(tmp_path / "full") if "loss" in r]
    assert [[r.get(k) for k in keys] for r in read_metrics(tmp_path / "part") if "loss" in r] == want
