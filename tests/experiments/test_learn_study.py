"""experiments/learn.py (`make learn`): correct demonstrations, lenient extraction, paired statistics."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import pytest

from prm_gym.agents.rollout import Trajectory, TurnRecord

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def study() -> ModuleType:
    spec = importlib.util.spec_from_file_location("learn_study", ROOT / "experiments" / "learn.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["learn_study"] = module
    spec.loader.exec_module(module)
    return module


def test_demonstrations_are_all_correct_and_call_once_per_step(study: ModuleType, tiny_tokenizer: Any) -> None:
    args = study.parse_args(["--demos", "24", "--train-tasks", "50"])
    chat = study.chat_for(tiny_tokenizer)
    demos = study.demonstrations(chat, args)  # asserts reward 1 for every one while playing
    env = gym.make("prm/Math-v0", **study.env_kwargs(args))
    tasks = env.unwrapped.tasks
    for k, (tokens, mask) in enumerate(demos):
        text = tiny_tokenizer.decode([t for t, m in zip(tokens, mask, strict=True) if m])
        task = tasks.get(list(tasks.ids)[k % len(tasks)])
        assert text.count("<tool_call>") == len(task.meta["calls"]) and f"<answer>{task.answer}</answer>" in text


def _traj(*actions: str) -> Trajectory:
    traj = Trajectory(task_id="t", prompt="p")
    traj.turns = [TurnRecord(a, "", 0.0, {}, "ok", 0, 0, {}) for a in actions]
    return traj


def test_lenient_extraction_ignores_tool_call_numbers(study: ModuleType) -> None:
    assert study.lenient_answer(_traj('<tool_call>{"arguments": {"expression": "6 * 7"}}</tool_call>')) is None
    assert study.lenient_answer(_traj("6 * 7 = 42", "so the answer is 1,042.")) == "1042"
    assert study.lenient_answer(_traj("<answer>17</answer> 18")) == "17"
    assert study.same_number("42.0", "42") and not study.same_number("abc", "42")


def test_paired_difference_counts_discordant_tasks(study: ModuleType) -> None:
    a = [{"task_id": str(i), "strict": i < 5} for i in range(10)]
    b = [{"task_id": str(i), "strict": 2 <= i < 9} for i in range(10)]
    c = study.paired(a, b)
    assert (c["b_only"], c["a_only"], c["n"]) == (4, 2, 10)
    assert c["diff"] == pytest.approx(0.2)
    diffs = [-1, -1, 0, 0, 0, 1, 1, 1, 1, 0]
    mean = sum(diffs) / 10
    assert c["se"] == pytest.approx((sum((d - mean) ** 2 for d in diffs) / 9 / 10) ** 0.5)


@pytest.mark.parametrize("flag", [[], ["--no-activation-checkpointing"]])
def test_both_learners_recompute_activations_unless_told_not_to(
    study: ModuleType, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flag: list[str]
) -> None:
    """make learn's learners recompute activations (docs/benchmarks.md, make learn's peak memory:
    the SFT phase 5.5 -> 4.3 GB); dropping that silently would bring the old peak back."""
    args = study.parse_args(["--output-dir", str(tmp_path), *flag])
    seen: dict[str, bool] = {}

    class Stop(Exception):
        pass

    def fake_train(cfg: Any) -> None:
        seen["grpo"] = cfg.loss.activation_checkpointing
        raise Stop

    def fake_sft(*_: Any, recompute: bool = False, **__: Any) -> None:
        seen["sft"] = recompute
        raise Stop

    monkeypatch.setattr(study, "train", fake_train)
    monkeypatch.setattr(study, "sft", fake_sft)
    monkeypatch.setattr(study, "load", lambda *_: (None, tiny_tokenizer))
    monkeypatch.setattr(study, "demonstrations", lambda *_: [])
    for phase in (study.phase_grpo, study.phase_sft):
        with pytest.raises(Stop):
            phase(tmp_path, args)
    assert seen == {"grpo": not flag, "sft": not flag}


@pytest.mark.parametrize("flag", [[], ["--no-map-large-allocations"]])
def test_make_learn_maps_large_allocations_unless_told_not_to(
    study: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flag: list[str]
) -> None:
    """make learn fixes glibc's mmap threshold before its first phase (docs/benchmarks.md: a GRPO
    step's peak 5.1-5.9 GB -> 3.7 GB); dropping that silently would bring the heap creep back."""
    calls: list[bool] = []

    class Stop(Exception):
        pass

    def first_phase(*_: Any) -> None:
        raise Stop

    monkeypatch.setattr(study, "map_large_allocations", lambda: calls.append(True) or True)
    monkeypatch.setattr(study, "phase_sft", first_phase)
    with pytest.raises(Stop):
        study.main(["--output-dir", str(tmp_path), *flag])
    assert calls == ([] if flag else [True])


def test_rft_plays_the_very_episodes_grpo_plays(study: ModuleType, tmp_path: Path) -> None:
    """RFT is GRPO's compute-matched alternative: the same tasks and reset seeds, step by step, as
    the trainer's collector draws them (before, RFT played the first 64 training tasks, which held
    36% one-call problems against 49% in the training set, and its fine-tuning drifted to two calls)."""
    from prm_gym.training.collect import StepCollector
    from prm_gym.training.worker import CollectStats

    args = study.parse_args(["--output-dir", str(tmp_path), "--seed", "3", "--steps", "5"])
    cfg = study.grpo_config(tmp_path, args)
    train_ids = {"prm/Math-v0": [f"t{i}" for i in range(300)]}
    jobs: list[Any] = []

    class Recording:
        def collect(self, batch: Any, *_: Any) -> tuple[list[Any], CollectStats]:
            jobs.extend(batch)
            return [], CollectStats()

    collector = StepCollector(cfg, Recording(), train_ids)  # type: ignore[arg-type]
    for step in range(cfg.steps):
        collector(step)
    played = [(job.task_id, seed) for job in jobs for seed in job.seeds]
    assert study.grpo_episodes(cfg, train_ids) == played
    assert (
        len(played) == 5 * args.tasks_per_step * args.group_size and len({t for t, _ in played}) > args.tasks_per_step
    )


def test_summary_clusters_by_template_and_says_gain_only_where_the_interval_excludes_zero(
    study: ModuleType, tmp_path: Path
) -> None:
    """The 28 Nov run's records (docs/results/learn-words): GRPO minus SFT on held-out phrasings is
    +7.5 points greedy (per-task s.e. 2.1, clustered 5.4 over 12 templates: no detectable difference)
    and +9.0 sampled (clustered 3.6: a gain, its t(11) interval above 0)."""
    import json

    run = ROOT / "docs" / "results" / "learn-words"
    results = {
        f"{m}-{s}-{d}": json.loads((run / f"{m}-{s}-{d}.json").read_text())
        for m in ("fewshot", "sft", "rft", "grpo")
        for s in ("numbers", "templates")
        for d in ("greedy", "sampled")
    }
    summary = study.summarise(tmp_path, results, {}, "cpu")
    greedy = summary["paired"]["grpo-vs-sft-templates-greedy"]
    assert greedy["clustered"]["se"] == pytest.approx(0.0539, abs=5e-4) and greedy["se"] == pytest.approx(
        0.0212, abs=5e-4
    )
    assert greedy["clustered"]["verdict"] == "no detectable difference"
    assert summary["paired"]["grpo-vs-sft-templates-sampled"]["clustered"]["verdict"] == "gain"
    md = (tmp_path / "summary.md").read_text()
    assert "| sft | templates | greedy | +7.5% | 2.1% | +3.5 | 17 / 2 | 5.4% (12) | [-4.4%, +19.4%], t(11) |" in md
    assert summary["table"]["grpo-templates-greedy"]["strict_clustered"]["clusters"] == 12


def _solved(tokens: list[int], outcome: float = 1.0) -> Trajectory:
    traj = Trajectory(task_id="t", prompt="p")
    traj.turns = [TurnRecord("<answer>1</answer>", "", outcome, {"outcome": outcome}, "ok", 0, 0, {})]
    traj.token_ids, traj.loss_mask = list(tokens), [1] * len(tokens)
    return traj


def test_rft_keeps_every_success_with_its_multiplicity(study: ModuleType) -> None:
    """Issue 44, item 3: a task solved the same way three times weighs three in RFT's data (the old
    recipe kept distinct successes only)."""
    same = [_solved([1, 2, 3]) for _ in range(3)]
    failed = _solved([1, 2, 4], outcome=0.0)
    other = _solved([5, 6])
    kept = study.rft_successes([same[0], failed, same[1], other, same[2]])
    assert kept == [same[0], same[1], other, same[2]]
    assert [tuple(t.token_ids) for t in kept].count((1, 2, 3)) == 3


class _Model:
    def __init__(self) -> None:
        self.lr = 0.0
        self.steps = 0


def _fake_learner(study: ModuleType, monkeypatch: pytest.MonkeyPatch, saved: list[tuple[float, int]]) -> None:
    """``load`` gives a fresh fake model, ``sft`` records its lr and steps and checkpoints like the real one,
    ``save_model`` records which (lr, step) was saved."""

    def fake_sft(model: Any, demos: Any, steps: int, lr: float, *_: Any, every: int = 0, checkpoint: Any = None,
                 **__: Any) -> float:  # fmt: skip
        model.lr = lr
        for step in range(steps):
            model.steps = step + 1
            if checkpoint is not None and every and (step + 1) % every == 0:
                checkpoint(step + 1)
        return 0.0

    monkeypatch.setattr(study, "load", lambda *_: (_Model(), None))
    monkeypatch.setattr(study, "sft", fake_sft)
    monkeypatch.setattr(study, "save_model", lambda model, tok, path: saved.append((model.lr, model.steps)))
    monkeypatch.setattr(study, "model_device", lambda model: "cpu")


def test_rft_learning_rate_grid_keeps_the_best_validation_checkpoint(
    study: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The grid picks the (lr, step) with the best validation score over every lr and step, saves
    that checkpoint, validates after the last step too, and keeps the first of a tie."""
    args = study.parse_args(["--output-dir", str(tmp_path), "--rft-every", "4"])
    saved: list[tuple[float, int]] = []
    _fake_learner(study, monkeypatch, saved)
    scores = {(1e-5, 4): 0.5, (1e-5, 6): 0.6, (3e-5, 4): 0.8, (3e-5, 6): 0.7, (1e-4, 4): 0.8, (1e-4, 6): 0.1}
    result = study.tune_on_validation(
        "hf:x", [([1], [1])], [1e-5, 3e-5, 1e-4], 6, tmp_path / "m", args,
        validate=lambda model, tok, _: scores[(model.lr, model.steps)],
    )  # fmt: skip
    assert (result["lr"], result["step"], result["val_success"]) == (3e-5, 4, 0.8)
    assert saved[-1] == (3e-5, 4) and (1e-4, 4) not in saved  # the tie does not replace the first
    assert [(h["lr"], h["step"]) for h in result["history"]] == list(scores)
    floor = study.tune_on_validation(
        "hf:x", [([1], [1])], [1e-5], 6, tmp_path / "m", args, floor=0.9, validate=lambda *_: 0.8
    )
    assert floor["lr"] is None and len(saved) == 3  # nothing beat the floor: nothing saved


def test_sft_learning_rate_grid_picks_on_validation_and_the_control_continues_at_the_chosen_rate(
    study: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--sft-lr as a grid: every rate trains from the base model, validated every --sft-every steps; the
    best (rate, step) is kept and recorded; SFT continued then defaults to the chosen rate, and a rerun
    with another grid is refused rather than reading the old SFT as the new one."""
    args = study.parse_args(["--output-dir", str(tmp_path), "--sft-lr", "1e-5", "5e-5", "--sft-steps", "6",
                             "--sft-every", "3"])  # fmt: skip
    saved: list[tuple[float, int]] = []
    _fake_learner(study, monkeypatch, saved)
    monkeypatch.setattr(study, "demonstrations", lambda *_: [([1, 2, 3], [0, 1, 1])])
    monkeypatch.setattr(study, "chat_for", lambda tok: None)
    scores = {(1e-5, 3): 0.4, (1e-5, 6): 0.7, (5e-5, 3): 0.6, (5e-5, 6): 0.5}
    monkeypatch.setattr(study, "validation_success", lambda model, *_: scores[(model.lr, model.steps)])
    info = study.phase_sft(tmp_path, args)
    assert (info["lr"], info["best_step"], info["best_val_success"]) == (1e-5, 6, 0.7)
    assert info["lrs"] == [1e-5, 5e-5] and saved[-1] == (1e-5, 6)
    assert [(h["lr"], h["step"]) for h in info["history"]] == list(scores)
    (tmp_path / "phases.json").write_text(json.dumps({"sft": info}))
    assert study.sft_rate(tmp_path, args) == 1e-5  # SFT continued's default rate: the chosen one
    study.check_resumed("sft", info, args, tmp_path)
    with pytest.raises(SystemExit, match="tuned over lr"):
        study.check_resumed("sft", info, study.parse_args(["--output-dir", str(tmp_path)]), tmp_path)
    with pytest.raises(SystemExit, match="trained at lr 5e-05, not 1e-05"):  # the control at the old rate
        study.check_resumed("sft_cont", {"lr": 5e-5}, args, tmp_path)
    with pytest.raises(SystemExit, match="trained at one rate, not the grid"):  # a record from before the grid
        study.check_resumed("sft", {"best_step": 20}, args, tmp_path)


def test_rft_phase_tunes_on_multiplicity_and_a_second_round_keeps_the_better(
    study: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    args = study.parse_args(["--output-dir", str(tmp_path), "--rft-rounds", "2", "--rft-lrs", "1e-5", "2e-5"])
    saved: list[tuple[float, int]] = []
    _fake_learner(study, monkeypatch, saved)
    played: list[int] = []

    def fake_play(model: Any, tok: Any, out: Path, args: Any, seed: int) -> list[Trajectory]:
        played.append(seed)
        return [_solved([1, 2]) for _ in range(12)] + [_solved([3], outcome=0.0) for _ in range(4)]

    monkeypatch.setattr(study, "play_grpo_episodes", fake_play)
    val = iter([0.5, 0.7, 0.75])  # round 1: lr 1e-5, lr 2e-5; round 2 at 2e-5
    monkeypatch.setattr(study, "validation_success", lambda *_: next(val))
    (tmp_path / "rft" / "model").mkdir(parents=True)
    info = study.phase_rft(tmp_path, args)
    assert len(set(played)) == 2 and info["successes"] == 12 and info["distinct"] == 1
    assert info["steps"] == min(args.steps, 3)  # 2 passes over 12 kept successes, 8 a step
    assert [r["lr"] for r in info["rounds"]] == [2e-5, 2e-5] and info["round"] == 2
    assert info["best_val_success"] == 0.75 and info["lr"] == 2e-5


def test_sft_continued_takes_grpos_updates_on_grpos_sequences(
    study: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GRPO's control: as many optimizer steps as GRPO (--steps), as many sequences a step as GRPO's
    episodes (tasks x group), at SFT's learning rate, from the sft checkpoint."""
    args = study.parse_args(["--output-dir", str(tmp_path), "--steps", "5"])
    seen: dict[str, Any] = {}

    def fake_sft(model: Any, demos: Any, steps: int, lr: float, batch: int, *_: Any, **__: Any) -> float:
        seen.update(steps=steps, lr=lr, batch=batch)
        return 0.0

    monkeypatch.setattr(study, "load", lambda source, _: seen.update(source=source) or (_Model(), None))
    monkeypatch.setattr(study, "sft", fake_sft)
    monkeypatch.setattr(study, "demonstrations", lambda *_: [([1, 2, 3], [0, 1, 1])])
    monkeypatch.setattr(study, "chat_for", lambda tok: None)
    monkeypatch.setattr(study, "save_model", lambda model, tok, path: seen.update(saved=path))
    monkeypatch.setattr(study, "model_device", lambda model: "cpu")
    info = study.phase_sft_continued(tmp_path, args)
    source, saved = f"hf:{tmp_path / 'sft' / 'model'}", tmp_path / "sft_cont" / "model"
    batch = args.tasks_per_step * args.group_size
    assert seen == {"source": source, "steps": 5, "lr": args.sft_lr[0], "batch": batch, "saved": saved}
    assert info["sequences"] == info["grpo_episodes"] == 5 * 32 and info["assistant_tokens_expected"] == 320
    # the control at GRPO's step size: --sft-continued-lr replaces SFT's rate, and the record says so
    args = study.parse_args(["--output-dir", str(tmp_path), "--steps", "5", "--sft-continued-lr", "3e-6"])
    info = study.phase_sft_continued(tmp_path, args)
    assert seen["lr"] == info["lr"] == 3e-6 != args.sft_lr[0]
    # resuming a run whose control was trained at another rate is refused, not read as the new arm
    study.check_resumed("sft_cont", info, args, tmp_path)
    with pytest.raises(SystemExit, match="trained at lr 3e-06, not 5e-05"):
        study.check_resumed("sft_cont", info, study.parse_args(["--output-dir", str(tmp_path)]), tmp_path)


def test_informative_groups_counts_the_last_row_of_each_step(study: ModuleType) -> None:
    rows = [
        {"step": 0, "eval/success": 0.1},
        {"step": 1, "groups/informative": 1.0, "groups/trained": 4.0},
        {"step": 2, "groups/informative": 0.0, "groups/trained": 4.0},
        {"step": 2, "groups/informative": 3.0, "groups/trained": 4.0},  # resumed: step 2 again
    ]
    got = study.informative_groups(rows)
    assert got["per_step"] == [1, 3] and (got["informative"], got["trained"]) == (4, 8) and got["share"] == 0.5
    assert "dropped_per_step" not in got
    dapo = study.informative_groups([{**rows[1], "dynamic/dropped_groups": 2.0}])
    assert dapo["dropped_per_step"] == [2]


def test_evaluations_run_the_primary_cell_first_load_each_model_once_a_cell_and_reuse_the_cache(
    study: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run cut short (a budget, a session's end) still has the pre-registered primary cell (GRPO and
    SFT continued, greedy, held-out templates): it is evaluated first, the few-shot model last, and a
    cached evaluation is never played again."""
    from experiments.learn_records import MODELS, MODES, SETS, record_file

    played: list[tuple[str, str, str]] = []
    loads: list[str] = []

    def load(source: str, args: Any) -> tuple[str, str]:
        loads.append(source)
        return source, "tok"

    monkeypatch.setattr(study, "load", load)
    monkeypatch.setattr(study, "model_device", lambda model: "cpu")

    def play(model: str, tok: Any, args: Any, which: str, temperature: float, seed: int, fewshot: bool) -> list[Any]:
        mode = "greedy" if temperature == 0.0 else "sampled"
        played.append((model, which, mode))
        return [{"task": "t", "template": "h01", "strict": True, "lenient": True, "calls": 1}]

    monkeypatch.setattr(study, "play", play)
    args = study.parse_args(["--output-dir", str(tmp_path)])
    (tmp_path / "evals").mkdir()
    record_file(tmp_path / "evals", "sft", "numbers", "sampled").write_text("[]")  # cached: not played again
    results = study.evaluate_all(tmp_path, args, {})

    names = ["fewshot" if p[0] == args.policy else Path(p[0]).parent.name for p in played]
    cells = [(n, s, m) for n, (_, s, m) in zip(names, played, strict=True)]
    assert cells[:2] == [("grpo", "templates", "greedy"), ("sft_cont", "templates", "greedy")]
    assert set(cells) == {(n, s, m) for n in MODELS for s in SETS for m in MODES} - {("sft", "numbers", "sampled")}
    assert len(cells) == len(set(cells)) == 19 and all(n == "fewshot" for n in names[-4:])
    # a trained model a cell (one cell cached), the few-shot model once
    assert loads.count(args.policy) == 1 and len(loads) == 4 * 4 - 1 + 1
    assert list(results)[:4] == [f"fewshot-{s}-{m}" for s in SETS for m in MODES] and len(results) == 20
