"""The evaluation report: pass@k and maj@k for user-chosen k, per level and per env, with
infra_error episodes out of the denominators and counted. Scripted answers make the numbers exact."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401
from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.errors import ConfigError, JudgeError
from prm_gym.core.policy import FakePolicy
from prm_gym.rewards.registry import register_judge
from prm_gym.rewards.testing import FakeJudge
from prm_gym.rewards.types import Turn
from prm_gym.training.cli import main, parse
from prm_gym.training.config import EvalConfig, SamplingConfig, TrainConfig
from prm_gym.training.evaluation import EvalSample, evaluate, majority_solved, report, summarise

INFRA = "<answer>INFRA</answer>"
NONE = "I am not sure."


def _infra_on_flag(turn: Turn) -> float:
    if turn.parsed.answer == "INFRA":
        raise JudgeError("judge server down")
    return 0.0


def test_majority_vote_ties_go_to_the_answer_given_first() -> None:
    s = [EvalSample("t", 0.0, False, "7"), EvalSample("t", 1.0, True, "8"), EvalSample("t", 1.0, True, "8")]
    assert majority_solved(s) is True  # 8 has two votes
    assert majority_solved(s[:2]) is False  # 7 and 8 tie: 7 came first
    assert majority_solved([EvalSample("t", 0.0, False, None), *s[1:2]]) is True  # no answer: no vote
    assert majority_solved([EvalSample("t", 0.0, False, None)]) is False


def test_report_is_exact_per_level_and_env_and_excludes_infra_errors() -> None:
    def s(task: str, ok: bool | None, answer: str | None = None) -> EvalSample:
        return EvalSample(task, float(bool(ok)), bool(ok), answer, infra_error=ok is None)

    samples = [s("a", True, "1"), s("a", False, "2"), s("a", False, "2"), s("a", True, "1")]
    samples += [s("b", False, "5"), s("b", True, "4"), s("b", False, "5")]
    samples += [s("c", None), s("c", False, None)]
    groups: dict[str, dict[str, Any]] = {"a": {"level": 1, "env": "E"}, "b": {"level": 2, "env": "E"}}
    groups["c"] = {"env": "F"}  # no level: only in the overall and env figures
    out = report(samples, (1, 2, 4), groups)
    assert out["infra_error_episodes"] == 1 and out["tasks_scored"] == 3
    # a: n=4 c=2; b: n=3 c=1; c: n=1 c=0 (its infra_error episode left out)
    assert out["pass@1"] == pytest.approx((0.5 + 1 / 3 + 0) / 3)
    assert out["pass@2"] == pytest.approx((5 / 6 + 2 / 3 + 0) / 3)
    assert out["pass@4"] == pytest.approx((1 + 1 + 0) / 3)  # b has 3 samples: pass@3
    assert out["maj@1"] == pytest.approx(1 / 3) and out["maj@4"] == pytest.approx(1 / 3)
    assert out["maj@2"] == pytest.approx(1 / 3)  # a: 1 vs 2 tie -> 1 (right); b: 5 vs 4 tie -> 5 (wrong)
    assert out["pass@2/level=1"] == pytest.approx(5 / 6) and out["maj@4/level=1"] == 1.0
    assert out["pass@2/level=2"] == pytest.approx(2 / 3) and out["maj@4/level=2"] == 0.0
    assert out["pass@4/env=E"] == 1.0 and out["pass@4/env=F"] == 0.0
    assert out["infra_error_episodes/env=F"] == 1 and out["infra_error_episodes/level=1"] == 0
    assert "pass@1/level=None" not in out
    # the old call form still works: pass@1 and pass@k
    assert set(summarise({"a": [1.0]}, {"a": 1}, 3, 0)) >= {"pass@1", "pass@3"}


def test_eval_k_is_validated_and_parsed() -> None:
    with pytest.raises(ConfigError, match=r"eval.k.*--eval.samples to at least 8"):
        EvalConfig(samples=4, k=(1, 8))
    with pytest.raises(ConfigError, match=r"eval\.k"):
        EvalConfig(k=(0,))
    assert parse(["--eval.samples", "8", "--eval.k", "1", "4", "8"]).eval.k == (1, 4, 8)


def test_evaluate_with_scripted_answers(tiny_tokenizer: Any) -> None:
    register_judge("test/infra_flag", lambda **kw: FakeJudge("test/infra_flag", _infra_on_flag), overwrite=True)
    env_kwargs = {"num_tasks": 6, "levels": [1, 2], "max_turns": 1}
    cfg = TrainConfig(
        env_kwargs=json.dumps(env_kwargs),
        judge="rule/math_equiv + test/infra_flag",
        sampling=SamplingConfig(max_new_tokens=64),
        eval=EvalConfig(num_tasks=3, samples=4, k=(1, 2, 4), temperature=0.0),
    )
    probe = gym.make("prm/Math-v0", **cfg.eval_env_kwargs)
    tasks = list(probe.unwrapped.tasks)[:3]  # type: ignore[attr-defined]
    probe.close()

    def right(i: int) -> str:
        return f"<answer>{tasks[i].answer}</answer>"

    def wrong(i: int) -> str:
        return f"<answer>{tasks[i].answer}1</answer>"

    script = [right(0), wrong(0), wrong(0), right(0)]  # c=2: maj@k tie 2-2 goes to the first answer (right)
    script += [wrong(1), right(1), wrong(1), NONE]  # c=1: the majority is wrong
    script += [NONE, INFRA, NONE, NONE]  # c=0, one infra_error episode left out
    policy = FakePolicy(tiny_tokenizer, script)
    out = evaluate(policy, ChatTemplate(tiny_tokenizer, tools_block="compact"), cfg)
    per_task = {
        "pass@1": [Fraction(1, 2), Fraction(1, 4), 0],
        "pass@2": [Fraction(5, 6), Fraction(1, 2), 0],
        "pass@4": [1, 1, 0],
        "maj@1": [1, 0, 0],
        "maj@2": [1, 0, 0],
        "maj@4": [1, 0, 0],
        "success": [Fraction(1, 2), Fraction(1, 4), 0],
    }
    assert out["infra_error_episodes"] == 1 and out["tasks_scored"] == 3
    assert out["episodes_per_s"] > 0  # 12 episodes over the evaluation's wall-clock time
    for key, values in per_task.items():
        assert out[key] == pytest.approx(float(sum(values)) / 3), key
        assert out[f"{key}/env=prm/Math-v0"] == out[key]
        for level in {t.meta["level"] for t in tasks}:
            mine = [v for v, t in zip(values, tasks, strict=True) if t.meta["level"] == level]
            assert out[f"{key}/level={level}"] == pytest.approx(float(sum(mine)) / len(mine)), (key, level)


def test_eval_mode_writes_pass_and_maj_at_the_chosen_k(tmp_path: Path) -> None:
    argv = ["--mode", "eval", "--env-kwargs", '{"levels": [1, 2], "num_tasks": 8, "max_turns": 1}']
    argv += ["--output-dir", str(tmp_path), "--eval.num-tasks", "2", "--eval.samples", "3", "--eval.k", "1", "3"]
    assert main([*argv, "--sampling.max-new-tokens", "4", "--tools-prompt", "compact"]) == 0
    result = json.loads((tmp_path / "eval.json").read_text())
    assert {"pass@1", "pass@3", "maj@1", "maj@3", "pass@3/env=prm/Math-v0"} <= set(result)
    assert any(k.startswith("maj@3/level=") for k in result)
    assert 0.0 <= result["pass@1"] <= result["pass@3"] <= 1.0


def test_success_reads_the_held_out_judges_outcome_when_they_judge_otherwise(tiny_tokenizer: Any) -> None:
    """A run trained on a judge with no outcome term (IGPO as its authors run it) and evaluated on the
    exact answer (--eval.env-kwargs '{"judge": ...}'): success reads the held-out judges' outcome."""
    from dataclasses import replace

    env_kwargs = {"num_tasks": 4, "levels": [1], "max_turns": 1}
    cfg = TrainConfig(
        env_kwargs=json.dumps(env_kwargs),
        judge="rule/format",
        sampling=SamplingConfig(max_new_tokens=64),
        eval=EvalConfig(
            env_kwargs=json.dumps({"split": "test", "judge": "rule/math_equiv"}), num_tasks=2, samples=1, temperature=0
        ),
    )
    cfg = replace(cfg, loss=replace(cfg.loss, outcome_terms=()))  # what the training judge declares outcome
    probe = gym.make("prm/Math-v0", **cfg.eval_env_kwargs)
    tasks = list(probe.unwrapped.tasks)[:2]  # type: ignore[attr-defined]
    probe.close()
    policy = FakePolicy(tiny_tokenizer, [f"<answer>{t.answer}</answer>" for t in tasks])
    out = evaluate(policy, ChatTemplate(tiny_tokenizer, tools_block="compact"), cfg)
    assert out["reward"] == 1.0 and out["success"] == 1.0
