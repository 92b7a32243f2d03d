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
    # no templates in these records: no clustered s.e.; across two seeds the interval is on t(1)
    assert "| grpo − sft | numbers | greedy | s0 | +75.0 | 25.0 | – | – | – | – |" in printed
    assert (
        "| grpo − sft | numbers | greedy | +75.0 | +50.0 | +62.5 ± 12.5 | [-96.3, +221.3], t(1) | 0.13 | 17.7 | 26.9 "
        "| – | – | no detectable difference |"
    ) in printed
    assert "| sft | numbers | greedy | 25.0 | 50.0 | 37.5 ± 12.5 | [-121.3, 196.3], t(1) |" in printed
    assert " gain " not in printed
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


SEEDS = [RESULTS / f"learn-c992789-seed{i}" for i in range(3)]


def test_three_recorded_seeds_cluster_by_template_and_call_no_gain_whose_interval_holds_zero() -> None:
    """make learn at c992789, seeds 0-2: GRPO minus SFT on held-out phrasings, greedy, is +4.0 ± 4.2
    across seeds (t(2): p 0.44, the interval holds 0); within seed 1 the template-clustered s.e. (12
    templates) is over four times the per-task one, because one template (h04) carries the gain."""
    out = learn_seeds.aggregate([learn_seeds.load_run(d) for d in SEEDS])
    c = out["comparisons"]["grpo-vs-sft-templates-greedy"]
    assert c["mean"] == pytest.approx(0.04) and c["df"] == 2 and c["p"] == pytest.approx(0.44, abs=0.01)
    assert c["lo"] < 0 < c["hi"] and c["verdict"] == "no detectable difference"
    seed1 = c["per_run"][1]
    assert seed1["clustered"]["clusters"] == 12 and seed1["clustered"]["se"] > 4 * seed1["se"]
    h04 = next(r for r in c["per_template"][1] if r["template"] == "h04")
    assert (h04["n"], h04["a"], h04["b"]) == (26, 1, 25)
    assert sum(r["n"] for r in c["per_template"][1]) == 200


def test_every_gain_printed_has_an_interval_above_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = tmp_path / "clustered.md"
    learn_seeds.main([*map(str, SEEDS), "--per-template", "--markdown", str(md)])
    printed = capsys.readouterr().out
    assert md.read_text() == printed and "GRPO − SFT per held-out template, greedy" in printed
    rows = [r.split(" | ") for r in printed.splitlines() if r.endswith("| gain |")]
    assert rows  # some per-run differences clear their interval (e.g. GRPO − RFT on new numbers)
    for cells in rows:
        interval = next(x for x in cells if x.startswith("["))
        assert float(interval[1:].split(",")[0]) >= 0  # +0.0 when it clears 0 by less than 0.05 points
    templates_greedy = [r for r in printed.splitlines() if r.startswith("| grpo − sft | templates | greedy | learn")]
    assert len(templates_greedy) == 3 and not any(r.endswith("| gain |") for r in templates_greedy)


def test_grpo_is_compared_with_its_control_where_every_run_has_one(tmp_path: Path) -> None:
    """GRPO minus SFT continued (the same updates without RL) appears where every run holds both
    arms, and not for runs from before that arm."""
    cells = {"grpo-numbers-greedy": [True] * 4, "sft-numbers-greedy": [True, False, False, False]}
    with_control = {**cells, "sft_cont-numbers-greedy": [True, True, False, False]}
    runs = [learn_seeds.load_run(_run(tmp_path, f"s{i}", with_control)) for i in range(2)]
    c = learn_seeds.aggregate(runs)["comparisons"]["grpo-vs-sft_cont-numbers-greedy"]
    assert [r["diff"] for r in c["per_run"]] == [0.5, 0.5]
    old = [learn_seeds.load_run(_run(tmp_path, f"old{i}", cells)) for i in range(2)]
    assert "grpo-vs-sft_cont-numbers-greedy" not in learn_seeds.aggregate(old)["comparisons"]
