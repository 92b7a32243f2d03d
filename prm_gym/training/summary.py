"""The few lines ``train-agent`` prints when a run ends: the last step's training reward, the
held-out figures before and after training, and where the outputs are.

Read from the run directory's ``metrics.jsonl`` (so a resumed run's summary covers the whole run)::

    trained 2 steps in 41.3s; outputs in runs/math
      train reward (last step)    0.125
      held-out (16 tasks scored)  before -> after
        reward                    0.000 -> 0.062
        success                   0.000 -> 0.062
        pass@1                    0.000 -> 0.062
      files: checkpoint.pt, metrics.jsonl, reward.png, staleness.png, success.png, tb/
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prm_gym.training.metrics import METRICS, read_metrics

#: The held-out keys shown, in order (those present in the eval rows).
EVAL_KEYS = ("reward", "success", "pass@1")


def _eval_keys(row: Mapping[str, Any]) -> list[str]:
    extra = sorted(k[5:] for k in row if k.startswith("eval/pass@") and "/" not in k[5:] and k != "eval/pass@1")
    extra += sorted(k[5:] for k in row if k.startswith("eval/maj@") and "/" not in k[5:])
    return [k for k in EVAL_KEYS if f"eval/{k}" in row] + extra


def run_summary(out_dir: str | Path, seconds: float | None = None) -> str:
    """The end-of-run summary of the run in ``out_dir`` (see the module docstring)."""
    out = Path(out_dir)
    rows = read_metrics(out) if (out / METRICS).exists() else []
    steps = [r for r in rows if "reward" in r]
    evals = [r for r in rows if "eval/reward" in r or "eval/tasks_scored" in r]
    last = int(rows[-1]["step"]) if rows else 0
    took = f" in {seconds:.1f}s" if seconds is not None else ""
    lines = [f"trained {last} steps{took}; outputs in {out}"]
    if steps:
        lines.append(f"  {'train reward (last step)':<28}{steps[-1]['reward']:.3f}")
    if evals:
        first, final = evals[0], evals[-1]
        n = int(final.get("eval/tasks_scored", 0))
        head = "before -> after" if len(evals) > 1 and first is not final else "after"
        lines.append(f"  {f'held-out ({n} tasks scored)':<28}{head}")
        for key in _eval_keys(final):
            after = f"{final[f'eval/{key}']:.3f}"
            before = first.get(f"eval/{key}") if first is not final else None
            shown = f"{before:.3f} -> {after}" if before is not None else after
            lines.append(f"    {key:<26}{shown}")
        if final.get("eval/infra_error_episodes"):
            lines.append(f"    {'infra_error episodes':<26}{int(final['eval/infra_error_episodes'])} (left out)")
    files = [p.name + ("/" if p.is_dir() else "") for p in sorted(out.iterdir()) if not p.name.startswith(".")]
    if files:
        lines.append(f"  files: {', '.join(files)}")
    return "\n".join(lines)
