"""Interop costs: judges as TRL reward functions, and trajectory export to jsonl/parquet.

Each measurement is a warm-up then REPS repetitions; it prints the median, the spread (min-max)
and a ratio against a baseline measured in the same run:

* TRL reward: ``trl_rewards(...)`` called as GRPOTrainer calls it (conversational completions,
  dataset columns) against scoring pre-built :class:`Turn` objects with the same judges directly,
  so the ratio is the adapter's overhead (rebuilding tasks, parsing completions).
* Export: ``export_trajectories`` to jsonl and parquet against ``json.dumps(traj.to_dict())``
  per line, the simplest dump of the same trajectories.

Run: ``.venv/bin/python benchmarks/bench_interop.py``.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from result_line import emit

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.export import export_trajectories
from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.core.parsing import format_tool_call
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.trl_adapter import build_turns, trl_rewards

REPS = 5
N_COMPLETIONS = 512
N_TRAJECTORIES = 200
EXPR = "rule/math_equiv + 0.1*rule/format"
BASELINES = {  # first word of a row's name -> what its baseline is
    "trl_rewards": "the same judges called directly on pre-built turns (a lower bound)",
    "export_trajectories": "json.dumps(traj.to_dict()) per line",
}
#: What a row's ratio measures when its baseline is a lower bound of the same work, not a peer.
NOTES = {
    "trl_rewards": "not a peer: the baseline skips the adapter's own work (rebuilding tasks and turns from "
    "TRL's columns, parsing every completion), so the ratio is that work's cost",
}


def measure(fn: Callable[[], object]) -> tuple[float, float, float]:
    """Median, min and max seconds of REPS runs after one warm-up."""
    fn()
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def report(name: str, result: tuple[float, float, float], baseline: tuple[float, float, float], unit: int) -> None:
    med, lo, hi = result
    print(
        f"{name:<34} median {med * 1e3:8.2f} ms  [{lo * 1e3:.2f}-{hi * 1e3:.2f}]  "
        f"{unit / med:10.0f}/s  ratio vs baseline {med / baseline[0]:5.2f}x"
    )
    if result is not baseline:
        spread = f"ours {lo * 1e3:.3g}-{hi * 1e3:.3g}, baseline {baseline[1] * 1e3:.3g}-{baseline[2] * 1e3:.3g}"
        kind = name.split(" ")[0]
        emit("interop", name, med * 1e3, baseline[0] * 1e3, BASELINES[kind], "ms", "lower", spread, NOTES.get(kind, ""))


def bench_rewards() -> None:
    prompts = [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(N_COMPLETIONS)]
    completions = [
        [
            {"role": "assistant", "content": format_tool_call("calculator", {"expression": f"{i}+{i}"})},
            {"role": "tool", "content": str(2 * i)},
            {"role": "assistant", "content": f"<answer>{2 * i if i % 3 else i}</answer>"},
        ]
        for i in range(N_COMPLETIONS)
    ]
    columns = {"answer": [str(2 * i) for i in range(N_COMPLETIONS)]}
    funcs, _ = trl_rewards(EXPR)
    judges = [make_judge(j) for j in ("rule/math_equiv", "rule/format")]
    turns = build_turns(prompts, completions, columns)

    def direct() -> None:
        for judge in judges:
            score_batch(judge, turns)

    def adapter() -> None:
        for f in funcs:
            f(prompts=prompts, completions=completions, **columns)

    base = measure(direct)
    print(f"\nTRL reward functions, {N_COMPLETIONS} conversational completions, {EXPR!r}")
    report("baseline: judges on built turns", base, base, N_COMPLETIONS)
    report("trl_rewards as GRPOTrainer calls", measure(adapter), base, N_COMPLETIONS)


def synthetic_trajectories() -> list[Trajectory]:
    trajs = []
    for i in range(N_TRAJECTORIES):
        traj = Trajectory(task_id=f"t{i}", prompt=f"What is {i} * 3? " * 8, seed=i)
        traj.extend(list(range(200)), trained=False)
        for k in range(4):
            start = len(traj.token_ids)
            traj.extend(list(range(100)), trained=True, logprobs=[-0.5] * 100)
            info = {"judge": {"rule/format": {"score": 0.0}}, "tool": {"calls": 1, "failed": 0}}
            terms = {"outcome": float(k == 3), "format": 0.0, "tool": 0.0}
            traj.turns.append(
                TurnRecord(
                    "<tool_call>{}</tool_call>" * 4,
                    "<tool_response>9</tool_response>",
                    0.0,
                    terms,
                    "ok",
                    start,
                    start + 100,
                    info,
                )
            )
            traj.extend(list(range(30)), trained=False)
        trajs.append(traj)
    return trajs


def bench_export() -> None:
    trajs = synthetic_trajectories()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)

        def baseline() -> None:
            with (out / "raw.jsonl").open("w") as fh:
                for t in trajs:
                    fh.write(json.dumps(t.to_dict()) + "\n")

        base = measure(baseline)
        print(f"\nExport of {N_TRAJECTORIES} trajectories (4 turns, 720 token ids each, tokens included)")
        report("baseline: json.dumps(to_dict())", base, base, N_TRAJECTORIES)
        for fmt in ("jsonl", "parquet"):
            path = out / f"t.{fmt}"

            def run(p: Path = path) -> int:
                return export_trajectories(trajs, p, include_tokens=True)

            result = measure(run)
            report(f"export_trajectories .{fmt}", result, base, N_TRAJECTORIES)
            print(f"{'':<34} file size {path.stat().st_size / 1e6:.2f} MB")
        print(f"{'':<34} baseline file size {(out / 'raw.jsonl').stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    bench_rewards()
    bench_export()
