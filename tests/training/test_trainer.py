"""The trainer end to end on the tiny model: sync, async, tree, resume, eval, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from prm_gym.core.errors import ConfigError
from prm_gym.training.checkpoint import load_checkpoint
from prm_gym.training.cli import main, parse
from prm_gym.training.config import (
    AsyncConfig,
    EvalConfig,
    LossConfig,
    RecipeConfig,
    SamplingConfig,
    TrainConfig,
    TreeConfig,
)
from prm_gym.training.metrics import read_metrics
from prm_gym.training.trainer import train

ENV_KW = '{"levels": [1], "num_tasks": 20, "max_turns": 2}'


def small(out: Path, **kw: object) -> TrainConfig:
    base: dict[str, object] = dict(
        env_kwargs=ENV_KW,
        group_size=2,
        tasks_per_step=1,
        steps=2,
        output_dir=str(out),
        progress=False,
        tensorboard=False,
        checkpoint_every=1,
        sampling=SamplingConfig(max_new_tokens=6),
        eval=EvalConfig(num_tasks=1, samples=1),
        loss=LossConfig(micro_batch_size=2),
    )
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="group_size"):
        TrainConfig(group_size=1)
    with pytest.raises(ConfigError, match=r"loss\.clip_low"):
        LossConfig(clip_low=1.5)
    with pytest.raises(ConfigError, match="env_kwargs"):
        TrainConfig(env_kwargs="{not json")
    with pytest.raises(ConfigError, match=r"roc_oversample.*--algo grpo"):
        TrainConfig(algo="tree-grpo", recipes=RecipeConfig(roc_oversample=1.5))
    with pytest.raises(ConfigError, match="max_excluded_fraction"):
        TrainConfig(max_excluded_fraction=1.5)
    # Tree-GRPO's leaves per task are M * (1 + N * L): a group_size that disagrees is refused, not ignored
    assert TrainConfig(algo="tree-grpo").tree.leaves_per_task == TrainConfig().group_size == 4
    with pytest.raises(ConfigError, match=r"group_size=4.*= 6 leaves per task; set --group-size 6"):
        TrainConfig(algo="tree-grpo", tree=TreeConfig(num_trees=2, expand_nodes=2, expand_rounds=1))
    assert TrainConfig(algo="tree-grpo", group_size=6, tree=TreeConfig(num_trees=2, expand_nodes=2)).group_size == 6
    with pytest.raises(ConfigError, match="device"):
        TrainConfig(device="gpu0")


def test_device_resolution() -> None:
    from prm_gym.training.ddp import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    if torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cuda", 0)
        assert resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    else:
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ConfigError, match="no GPU"):
            resolve_device("cuda")


def test_cli_parses_nested_flags() -> None:
    cfg = parse(
        [
            "--env",
            "prm/Math-v0",
            "--algo",
            "tree-grpo",
            "--tree.num-trees",
            "3",
            "--group-size",
            "6",
            "--loss.kl-coef",
            "0.1",
            "--asynchronous.max-staleness",
            "2",
            "--steps",
            "7",
            "--lr",
            "3e-5",
        ]
    )
    assert (cfg.algo, cfg.tree.num_trees, cfg.loss.kl_coef, cfg.asynchronous.max_staleness, cfg.steps) == (
        "tree-grpo",
        3,
        0.1,
        2,
        7,
    )
    assert cfg.lr == 3e-5


def test_help_is_fast_and_complete() -> None:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "prm_gym.training.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert time.perf_counter() - start < 10
    for flag in (
        "--env",
        "--policy",
        "--judge",
        "--algo",
        "--group-size",
        "--steps",
        "--lr",
        "--output-dir",
        "--seed",
        "--resume",
        "--asynchronous.max-staleness",
        "--tree.expand-nodes",
        "--eval.samples",
    ):
        assert flag in out.stdout, flag
    assert (
        "torch"
        not in subprocess.run(
            [sys.executable, "-c", "import sys, prm_gym.training.config; print(' '.join(sys.modules))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )


def test_sync_training_logs_plots_checkpoints_and_resumes_exactly(tmp_path: Path) -> None:
    full = train(small(tmp_path / "full", steps=2))
    part = tmp_path / "part"
    train(small(part, steps=1))
    resumed = train(small(part, steps=2, resume=True))
    assert resumed.step == full.step == 2
    for a, b in zip(full.policy.model.parameters(), resumed.policy.model.parameters(), strict=True):
        assert torch.equal(a, b)
    rows = [r for r in read_metrics(part) if "reward" in r]
    assert [r["step"] for r in rows] == [1, 2]
    full_rows = [r for r in read_metrics(tmp_path / "full") if "reward" in r]
    assert [r["reward"] for r in rows] == [r["reward"] for r in full_rows]
    assert [r["generated_tokens"] for r in rows] == [r["generated_tokens"] for r in full_rows]
    assert (part / "reward.png").stat().st_size > 0 and (part / "staleness.png").exists()
    assert load_checkpoint(part)["step"] == 2
    assert not list(part.glob(".ckpt-*"))  # no temporary files left


def test_async_training_records_staleness(tmp_path: Path) -> None:
    cfg = small(tmp_path, steps=2, asynchronous=AsyncConfig(enabled=True, max_staleness=1))
    train(cfg)
    rows = [r for r in read_metrics(tmp_path) if "reward" in r]
    assert len(rows) == 2
    assert all(0 <= r["staleness_max"] <= 1 for r in rows)


def test_tree_grpo_training_step(tmp_path: Path) -> None:
    cfg = small(
        tmp_path, steps=1, algo="tree-grpo", group_size=4, tree=TreeConfig(num_trees=2, expand_nodes=1, expand_rounds=1)
    )
    train(cfg)
    row = next(r for r in read_metrics(tmp_path) if "reward" in r)
    assert row["trained_rows"] + row["excluded_trajectories"] == 4
    assert row["generated_tokens"] > 0
    assert row["groups/trained"] == 1 and row["groups/informative"] in (0.0, 1.0)  # one tree job a step


def test_eval_mode_writes_results(tmp_path: Path) -> None:
    code = main(
        [
            "--mode",
            "eval",
            "--env-kwargs",
            ENV_KW,
            "--output-dir",
            str(tmp_path),
            "--eval.num-tasks",
            "2",
            "--eval.samples",
            "2",
            "--sampling.max-new-tokens",
            "4",
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "eval.json").read_text())
    assert {"reward", "reward_se", "success", "pass@1", "pass@2"} <= set(result)
    assert 0.0 <= result["pass@1"] <= result["pass@2"] <= 1.0


def test_cli_reports_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--env", "prm/Nope-v0", "--steps", "1", "--output-dir", "/tmp/never"]) == 2
    assert "not registered" in capsys.readouterr().err


def test_a_run_whose_turns_are_mostly_excluded_stops_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from prm_gym.rewards.registry import register_judge
    from prm_gym.rewards.testing import FakeJudge, failing

    register_judge("test/down", lambda **kw: FakeJudge("test/down", failing("judge server down")), overwrite=True)
    argv = ["--env-kwargs", ENV_KW, "--judge", "rule/math_equiv + test/down", "--steps", "10", "--group-size", "2"]
    argv += ["--output-dir", str(tmp_path), "--no-progress", "--no-tensorboard", "--sampling.max-new-tokens", "4"]
    assert main([*argv, "--eval.num-tasks", "1", "--eval.samples", "1"]) == 2
    err = capsys.readouterr().err
    assert "were excluded as infra_error" in err and "--max-excluded-fraction" in err
    rows = [r for r in read_metrics(tmp_path) if "excluded_turns_frac" in r]
    assert 1 <= len(rows) < 10 and rows[-1]["excluded_turns_frac"] == 1.0


def test_resume_without_a_checkpoint_starts_from_scratch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = train(small(tmp_path / "fresh", steps=1, resume=True))
    assert run.step == 1 and load_checkpoint(tmp_path / "fresh")["step"] == 1
    assert "no checkpoint" in capsys.readouterr().err
    train(small(tmp_path / "fresh", steps=1))  # again, without --resume: said, since it replaces the run
    assert "holds a run; this one starts over" in capsys.readouterr().err


def test_eval_leaves_infra_error_episodes_out_of_the_denominators(tmp_path: Path) -> None:
    from prm_gym.rewards.registry import register_judge
    from prm_gym.rewards.testing import FakeJudge, failing
    from prm_gym.training.evaluation import summarise

    register_judge("test/down", lambda **kw: FakeJudge("test/down", failing("judge server down")), overwrite=True)
    argv = ["--mode", "eval", "--env-kwargs", ENV_KW, "--judge", "rule/math_equiv + test/down"]
    assert main([*argv, "--output-dir", str(tmp_path), "--eval.num-tasks", "2", "--eval.samples", "2"]) == 0
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["infra_error_episodes"] == 4 and result["tasks_scored"] == 0 and "success" not in result
    # one task: 1 win of 2 scored episodes (a third was infra_error); the other task unscored
    out = summarise({"a": [1.0, 0.0], "b": []}, {"a": 1, "b": 0}, 3, infra=1)
    assert out["success"] == 0.5 and out["tasks_scored"] == 1 and out["infra_error_episodes"] == 1


def test_a_bug_in_a_judge_fails_the_run_loudly(tmp_path: Path) -> None:
    """A KeyError in a judge is our bug, not an infrastructure failure: train-agent does not exclude
    the turn and carry on, it stops with the error."""
    from prm_gym.rewards.registry import register_judge
    from prm_gym.rewards.testing import FakeJudge

    def buggy(turn: object) -> float:
        return {}["score"]  # type: ignore[no-any-return]

    register_judge("test/buggy", lambda **kw: FakeJudge("test/buggy", buggy), overwrite=True)
    argv = ["--env-kwargs", ENV_KW, "--judge", "rule/math_equiv + test/buggy", "--steps", "2", "--group-size", "2"]
    argv += ["--output-dir", str(tmp_path), "--no-progress", "--no-tensorboard", "--sampling.max-new-tokens", "4"]
    with pytest.raises(KeyError, match="score"):
        main([*argv, "--eval.num-tasks", "1", "--eval.samples", "1"])
    assert not (tmp_path / "checkpoint.pt").exists()


def test_judge_usage_is_logged_per_judge(tmp_path: Path) -> None:
    train(small(tmp_path, steps=1))
    row = next(r for r in read_metrics(tmp_path) if "loss" in r)
    keys = [k for k in row if k.startswith("judge/")]
    assert any(k.endswith("/latency_s") for k in keys) and any(k.endswith("/tokens") for k in keys), row


def test_bf16_precision_trains_fp32_weights_through_a_bf16_sampler(tmp_path: Path) -> None:
    run = train(small(tmp_path, steps=1, precision="bf16"))
    rows = [r for r in read_metrics(tmp_path) if "reward" in r]
    assert len(rows) == 1 and rows[0]["generated_tokens"] > 0
    assert torch.isfinite(torch.tensor(rows[0]["loss"]))
    assert run.policy.model.dtype == torch.float32 and run.policy.sample_dtype == "bfloat16"
    assert run.policy.sampler_model().dtype == torch.bfloat16


def test_a_run_ends_with_a_summary_of_its_figures_and_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--env-kwargs", ENV_KW, "--steps", "1", "--group-size", "2", "--tasks-per-step", "1"]
    argv += ["--sampling.max-new-tokens", "4", "--eval.num-tasks", "2", "--eval.samples", "1", "--no-progress"]
    assert main([*argv, "--output-dir", str(tmp_path), "--no-tensorboard"]) == 0
    out = capsys.readouterr().out
    rows = read_metrics(tmp_path)
    first, final = rows[0], rows[-1]
    assert "trained 1 steps in " in out and f"outputs in {tmp_path}" in out
    assert f"train reward (last step)    {rows[1]['reward']:.3f}" in out
    assert "held-out (2 tasks scored)" in out and "before -> after" in out
    assert f"success                   {first['eval/success']:.3f} -> {final['eval/success']:.3f}" in out
    assert "files: checkpoint.pt, metrics.jsonl, model/, reward.png" in out


def test_the_default_eval_is_sized_to_the_run() -> None:
    """Left at 0, held-out eval plays 8 tasks x 1 sample for a run under 10 steps (a 2-step run of a new
    env is not dominated by 2 x 128 eval episodes), 16 x 2 under 50, 32 x 4 beyond and in --mode eval;
    numbers given are kept, and samples cover the largest --eval.k."""
    sizes = {s: (TrainConfig(steps=s).eval.num_tasks, TrainConfig(steps=s).eval.samples) for s in (2, 9, 10, 49, 50)}
    assert sizes == {2: (8, 1), 9: (8, 1), 10: (16, 2), 49: (16, 2), 50: (32, 4)}
    assert (TrainConfig(mode="eval").eval.num_tasks, TrainConfig(mode="eval").eval.samples) == (32, 4)
    given = TrainConfig(steps=2, eval=EvalConfig(num_tasks=3, samples=5))
    assert (given.eval.num_tasks, given.eval.samples) == (3, 5)
    assert TrainConfig(steps=2, eval=EvalConfig(k=(1, 4))).eval.samples == 4
    with pytest.raises(ConfigError, match=r"eval\.k"):
        TrainConfig(steps=2, eval=EvalConfig(samples=2, k=(4,)))


def test_each_learner_step_starts_with_the_samplers_kept_caches_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The KV caches an HF sampler keeps for an episode's next turn are useless once the group's
    episodes are over; the learner step must not hold them (make learn's peak memory)."""
    from prm_gym.agents.hf import HFPolicy
    from prm_gym.training import trainer as trainer_module

    samplers: list[HFPolicy] = []
    init, forget, step = HFPolicy.__init__, HFPolicy.forget, trainer_module.learner_step
    had: list[bool] = []
    held: list[bool] = []

    def record(self: HFPolicy, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        samplers.append(self)

    def spy(self: HFPolicy) -> None:
        had.append(self._prefixes is not None)
        forget(self)

    def watched(model: Any, opt: Any, batch: Any, cfg: Any, **kw: Any) -> Any:
        held.append(any(p._prefixes is not None for p in samplers))
        return step(model, opt, batch, cfg, **kw)

    monkeypatch.setattr(HFPolicy, "__init__", record)
    monkeypatch.setattr(HFPolicy, "forget", spy)
    monkeypatch.setattr(trainer_module, "learner_step", watched)
    trainer_module.train(small(tmp_path, steps=2))
    assert held == [False, False] and any(had)  # the rollouts had kept caches, and none reached the learner


def test_unusable_verdicts_are_counted_per_judge_in_the_metrics() -> None:
    """A judge model that stopped answering in its format scores the minimum (not infra), so its count
    must show in the metrics, or a broken judge would look like a policy that got worse."""
    from types import SimpleNamespace

    from prm_gym.rewards.types import Verdict
    from prm_gym.training.metrics import judge_usage

    def traj(*verdicts: Verdict) -> Any:
        turns = [
            SimpleNamespace(info={"judge": {"llm/turn": v.as_info(), "rule/format": {"score": 0.0}}}) for v in verdicts
        ]
        return SimpleNamespace(turns=turns)

    bad, good = Verdict(0.0, latency_s=0.2, unusable=True), Verdict(0.7, latency_s=0.2)
    out = judge_usage([traj(bad, good), traj(bad)])
    assert out["judge/llm/turn/unusable"] == 2.0 and "judge/rule/format/unusable" not in out
    assert "judge/llm/turn/unusable" not in judge_usage([traj(good)])


def test_a_file_that_is_not_a_checkpoint_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--init-checkpoint on a text file raised torch's UnpicklingError/KeyError; a missing one named --resume."""
    text, listed = tmp_path / "notes.pt", tmp_path / "list.pt"
    text.write_text("hello")
    torch.save([1, 2], listed)
    with pytest.raises(ConfigError, match="not a checkpoint torch can load"):
        load_checkpoint(text)
    with pytest.raises(ConfigError, match="holds a list"):
        load_checkpoint(listed)
    argv = ["--init-checkpoint", str(tmp_path / "nope.pt"), "--steps", "1", "--output-dir", str(tmp_path / "r")]
    assert main([*argv, "--no-progress"]) == 2
    assert "--init-checkpoint the file named" in capsys.readouterr().err
