"""Progress bars: every long wait (evaluation, index builds, prm-export, task generation, model
loading, training) draws a bar on stderr when bars are on, and nothing when they are off.

``PRM_GYM_PROGRESS=1`` forces bars on (pytest's stderr is no terminal, where ``auto`` draws none).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from prm_gym.core import progress
from prm_gym.core.progress import bar, track
from prm_gym.envs.search.index import BM25Index, Passage, write_corpus

PASSAGES = [Passage(f"d{i}", f"Title {i}", f"Passage number {i} about rivers and cities.") for i in range(5)]


def drawn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], work: Callable[[], Any], *labels: str
) -> str:
    """stderr of ``work()`` with bars forced on, holding each of ``labels``; checks first that with
    bars off none of them is drawn. (A bar drawn as ``label: ... 0/5`` may close before it redraws
    its last count: tqdm redraws at most every 0.1 s.)"""
    monkeypatch.setenv(progress.ENV_VAR, "0")
    capsys.readouterr()
    work()
    silent = capsys.readouterr().err
    assert not any(f"{label}:" in silent for label in labels), silent
    monkeypatch.setenv(progress.ENV_VAR, "1")
    work()
    err = capsys.readouterr().err
    for label in labels:
        assert f"{label}:" in err, (label, err)
    return err


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", "auto"), ("auto", "auto"), ("0", "off"), ("OFF", "off"), ("no", "off"), ("1", "on"), ("always", "on")],
)
def test_the_switch_reads_prm_gym_progress(monkeypatch: pytest.MonkeyPatch, value: str, expected: str) -> None:
    monkeypatch.setenv(progress.ENV_VAR, value)
    assert progress.mode() == expected


def test_auto_draws_nothing_off_a_terminal_and_the_flag_wins(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(progress.ENV_VAR, raising=False)
    assert list(track(range(3), desc="quiet")) == [0, 1, 2]
    with bar(3, "quiet too", delay=0.0) as b:
        b.update(3)
    monkeypatch.setenv(progress.ENV_VAR, "1")
    with bar(3, "flag off", enabled=False) as b:
        b.update(3)
    assert capsys.readouterr().err == ""
    assert list(track(iter("ab"), desc="loud", unit="letter")) == ["a", "b"]  # no len(): a counter
    err = capsys.readouterr().err
    assert "loud" in err and "letter" in err


def test_bm25_index_build(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    err = drawn(monkeypatch, capsys, lambda: BM25Index.build(PASSAGES), "BM25 index")
    assert "/5 [" in err and "doc" in err


@pytest.mark.skipif(importlib.util.find_spec("pyserini") is None, reason="needs the pyserini extra")
def test_lucene_index_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prm_gym.envs.search.index.pyserini_backend import build_lucene_index

    corpus = write_corpus(PASSAGES, tmp_path / "corpus.jsonl")
    monkeypatch.setenv(progress.ENV_VAR, "1")
    build_lucene_index(corpus, tmp_path / "lucene")
    err = capsys.readouterr().err
    assert "Lucene corpus" in err and "Lucene index" in err


def test_task_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from prm_gym.envs.code.gen import generate_code_tasks
    from prm_gym.envs.math.tasks import generate_math_tasks
    from prm_gym.envs.search.tasks import generate_search_tasks, generate_world
    from prm_gym.envs.sql.tasks import generate_sql_tasks

    seeds = iter(range(7001, 7100))  # fresh arguments each call: generators memoise per argument set

    def generate() -> None:
        seed = next(seeds)
        generate_math_tasks(7, seed)
        generate_code_tasks(7, seed)
        generate_search_tasks(generate_world(8, 0), 7, seed)
        generate_sql_tasks(7, seed, schemas=("shop",), dbs_per_schema=1, cache_dir=tmp_path)

    drawn(monkeypatch, capsys, generate, "math tasks", "code tasks", "search tasks", "SQL databases", "SQL tasks")


def test_model_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from prm_gym.core.models import load_hf, tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    tiny_model(len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    err = drawn(monkeypatch, capsys, lambda: load_hf(f"hf:{tmp_path}"), f"loading hf:{tmp_path}")
    assert "/3 [" in err and "tokenizer" in err


def test_evaluation(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tiny_tokenizer: Any) -> None:
    from prm_gym.agents.chat import ChatTemplate
    from prm_gym.core.policy import FakePolicy
    from prm_gym.training.config import EvalConfig, TrainConfig
    from prm_gym.training.evaluation import evaluate

    cfg = TrainConfig(env_kwargs=json.dumps({"num_tasks": 4, "max_turns": 1}), eval=EvalConfig(num_tasks=3, samples=2))
    chat = ChatTemplate(tiny_tokenizer, tools_block="compact")
    err = drawn(
        monkeypatch, capsys, lambda: evaluate(FakePolicy(tiny_tokenizer, ["<answer>1</answer>"]), chat, cfg), "eval"
    )
    assert "/6 [" in err and "episode" in err
    monkeypatch.setenv(progress.ENV_VAR, "1")
    quiet = TrainConfig(env_kwargs=cfg.env_kwargs, eval=cfg.eval, progress=False)  # train-agent --no-progress
    evaluate(FakePolicy(tiny_tokenizer, ["<answer>1</answer>"]), chat, quiet)
    assert "episode" not in capsys.readouterr().err


def test_prm_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from prm_gym.agents.export import main

    argv = ["--episodes", "2", "--max-new-tokens", "2", "--output", str(tmp_path / "t.jsonl")]
    monkeypatch.setenv(progress.ENV_VAR, "1")
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "prm-export:" in err and "/2 [" in err and "episode" in err
    assert main([*argv[:1], "1", *argv[2:], "--no-progress"]) == 0
    assert "prm-export:" not in capsys.readouterr().err


def test_the_training_bar_follows_the_same_switch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prm_gym.training.metrics import Progress

    def train_two_steps() -> None:
        p = Progress(2)
        p.update({"reward": 0.5, "staleness_mean": 0.0, "tokens_per_s": 10.0})
        p.update({"reward": 0.75})
        p.close()

    err = drawn(monkeypatch, capsys, train_two_steps, "train")
    assert "/2 [" in err and "reward=" in err
