"""experiments/learn_seeds.py: make learn's arms and comparisons across seeds, from real and hostile records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import learn_seeds
from experiments.compare_stats import paired

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def _run(tmp: Path, name: str, arms: dict[str, list[bool]], ids: list[str] | None = None) -> Path:
    d = tmp / name / "evals"
    d.mkdir(parents=True)
    for key, wins in arms.items():
        rows = [{"task_id": (ids or [str(i) for i in range(len(wins))])[i], "strict": w} for i, w in enumerate(wins)]
        (d / f"{key}.json").write_text(json.dumps(rows))
    return tmp / name


def test_two_recorded_seeds_give_their_paired_differences_and_the_spread_between_them() -> None:
    """The raw records of make learn at 5364c48, seeds 0 and 1 (docs/results/): GRPO minus SFT on
    held-out phrasings, greedy, was -3.0 and +11.5 points; across the two the mean is +4.25 with
    s.e. |a - b| / 2 = 7.25, and the s.d. between runs (10.3) is about four times the within-run s.e."""
    runs = [learn_seeds.load_run(RESULTS / "learn-5364c48"), learn_seeds.load_run(RESULTS / "learn-5364c48-seed1")]
    out = learn_seeds.aggregate(runs)
    c = out["comparisons"]["grpo-vs-sft-templates-greedy"]
    assert [round(r["diff"], 3) for r in c["per_run"]] == [-0.03, 0.115]
    assert c["mean"] == pytest.approx(0.0425) and c["se"] == pytest.approx(0.0725)
    assert c["sd_between_runs"] > 3 * c["mean_within_run_se"]
    assert out["arms"]["sft-numbers-greedy"]["per_run"] == [0.88, 0.895]
    assert "fewshot-numbers-greedy" not in out["arms"]  # seed 1 was stopped before its few-shot evaluations


def test_cli_prints_both_tables_and_writes_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _run(tmp_path, "s0", {"sft-numbers-greedy": [True, False, False, False], "grpo-numbers-greedy": [True] * 4})
    b = _run(tmp_path, "s1", {"sft-numbers-greedy": [True, True, False, False], "grpo-numbers-greedy": [True] * 4})
    md = tmp_path / "seeds.md"
    learn_seeds.main([str(a), str(b), "--markdown", str(md)])
    printed = capsys.readouterr().out
    assert "| grpo − sft | numbers | greedy | +75.0 ± 25.0 | +50.0 ± 28.9 | +62.5 ± 12.5 | 17.7 |" in printed
    assert "| sft | numbers | greedy | 25.0 | 50.0 | 37.5 ± 12.5 |" in printed
    assert md.read_text() == printed


def _mixed(tmp: Path) -> Path:
    """A run whose GRPO records name other tasks than its SFT records."""
    d = _run(tmp, "mixed", {"sft-numbers-greedy": [True, False]})
    (d / "evals" / "grpo-numbers-greedy.json").write_text(json.dumps([{"task_id": "9", "strict": True}] * 2))
    return d


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda t: [t / "empty", t / "empty2"], "no evaluation records"),
        (lambda t: [_run(t, "only", {"sft-numbers-greedy": [True]})], "at least two runs"),
        (
            lambda t: [
                _run(t, "a", {"sft-numbers-greedy": [True, False], "grpo-numbers-greedy": [True, True]}),
                _mixed(t),
            ],
            "same distinct task ids",
        ),
    ],
)
def test_cli_refuses_what_it_cannot_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: object, message: str
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty2").mkdir()
    dirs = setup(tmp_path)  # type: ignore[operator]
    with pytest.raises(SystemExit) as e:
        learn_seeds.main([str(d) for d in dirs])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_corrupt_record_file_is_named(tmp_path: Path) -> None:
    d = _run(tmp_path, "a", {"sft-numbers-greedy": [True]})
    (d / "evals" / "grpo-numbers-greedy.json").write_bytes(b"\xff\xfe not json")
    with pytest.raises(ValueError, match=r"grpo-numbers-greedy\.json: not a JSON evaluation record"):
        learn_seeds.load_run(d)
    (d / "evals" / "grpo-numbers-greedy.json").write_text("{}")
    with pytest.raises(ValueError, match="non-empty list"):
        learn_seeds.load_run(d)


def test_pairing_refuses_records_of_different_tasks() -> None:
    a = [{"task_id": "1", "strict": True}, {"task_id": "2", "strict": False}]
    with pytest.raises(ValueError, match="same distinct task ids"):
        paired(a, [{"task_id": "1", "strict": True}, {"task_id": "3", "strict": True}])
    with pytest.raises(ValueError, match="same distinct task ids"):
        paired(a, [{"task_id": "1", "strict": True}, {"task_id": "1", "strict": True}])
    with pytest.raises(ValueError, match="same distinct task ids"):
        paired(a, [])
    assert paired(a, list(reversed(a)))["diff"] == 0.0
