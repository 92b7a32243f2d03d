"""The env server under concurrent remote clients (issue 45, item 2), at a tiny size.

Runs ``benchmarks/bench_serve_load.py``'s ``main`` for a few seconds: a real ``prm-serve``
subprocess, a few ``RemoteEnv`` clients playing scripted gold episodes back to back, an overload
phase past ``--max-sessions`` (503s, backed off), and on prm/Code-v0 (bubblewrap needed) one A/B
round with a client burning CPU in the ``python`` tool. The full-size run is the benchmark itself.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = ["--clients", "4", "--warmup-s", "0.5", "--overload-s", "2", "--sample-s", "0.5", "--request-timeout-s", "60"]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_serve_load_under_test", BENCH / "bench_serve_load.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _check(r: dict[str, Any], full: str) -> None:
    """What every env's run must show: episodes, only 503s, server figures, a server that is gone."""
    assert r["load"]["episodes"] > 0 and r["load"]["episodes_per_s"] > 0
    assert r["load"]["step_p50_ms"] is not None and r["load"]["step_p99_ms"] >= r["load"]["step_p50_ms"]
    assert r["load"]["reset_p99_ms"] is not None
    assert r["unacceptable_errors"] == {}, r["errors"]
    assert set(r["errors"]) <= {full}
    o = r["overload"]
    assert o["refused_503"] > 0 and o["sessions_opened"] > 0  # the 503 path ran, and clients got in after it
    assert r["errors"][full] >= o["refused_503"]
    assert r["peak_sessions"] <= r["max_sessions"]
    gold = r["gold_answers"]
    assert gold["episodes"] > 0 and gold["solved"] == gold["episodes"]  # the scripted gold answers are right
    assert r["turns"]["tool"] > 0 and r["turns"]["answer"] > 0
    for key in ("rss_mib", "fds", "threads"):
        fig = r["server_figures"][key]
        assert fig["start"] > 0 and fig["end"] > 0 and fig["min"] <= fig["max"], (key, fig)
    assert len(r["samples"]) >= 3
    assert r["server_figures"]["sessions"]["after_clients_closed"] == 0  # every client closed its session
    assert not r["hung_threads"]
    stop = r["stop"]
    assert stop["gone"] and stop["left_behind"] == [] and stop["how"] == "SIGTERM"
    assert not Path(f"/proc/{r['server']['pid']}").exists()  # the server process is gone (and reaped)


def test_math_under_load_and_overload(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    out = bench.main(["--envs", "math", "--minutes", "0.05", "--no-burn", *TINY])
    (r,) = out["envs"]
    assert r["env"] == "prm/Math-v0" and "burn" not in r
    _check(r, bench.FULL)
    printed = capsys.readouterr().out
    assert "| prm/Math-v0 |" in printed and 'RESULT {"bench": "serve_load"' in printed
    assert "clients and server on ONE machine" in printed


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_code_with_a_cpu_burning_client(tmp_path: Path) -> None:
    bench = _bench()
    argv = ["--envs", "code", "--minutes", "0.05", "--rounds", "1", "--tool-timeout-s", "1", *TINY]
    out = bench.main([*argv, "--json", str(tmp_path / "figures.json")])
    (r,) = out["envs"]
    _check(r, bench.FULL)
    b = r["burn"]
    assert b["burner_steps"] >= 1 and b["burner_step_median_s"] >= 0.9  # it burned until its 1 s deadline
    assert b["A"]["steps"] > 0 and b["B"]["steps"] > 0
    assert b["p99_ratio_B_over_A"] is not None and b["p99_ratio_B_over_A"] > 0
    assert (tmp_path / "figures.json").stat().st_size > 0
