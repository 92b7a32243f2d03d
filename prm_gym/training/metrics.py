"""Run metrics: jsonl lines, PNG plots, optional TensorBoard, a live progress bar."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prm_gym.agents.rollout import Trajectory
from prm_gym.core.errors import InfraError
from prm_gym.core.progress import bar, shown
from prm_gym.training.batch import outcome_and_process

METRICS = "metrics.jsonl"


def reward_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Mean episode reward, mean of each reward term per episode, mean turns."""
    n = len(trajs)
    out = {"reward": sum(t.total_reward for t in trajs) / n}
    for term in sorted({k for t in trajs for turn in t.turns for k in turn.terms}):
        out[f"reward/{term}"] = sum(x.terms.get(term, 0.0) for t in trajs for x in t.turns) / n
    out["turns"] = sum(len(t.turns) for t in trajs) / n
    out.update(judge_usage(trajs))
    return out


def env_metrics(
    trajs: Sequence[Trajectory], env_ids: Sequence[str], outcome_terms: Sequence[str], threshold: float
) -> dict[str, float]:
    """Per env of a mixture (``Trajectory.env_id``; nothing for a one-env run): ``episodes/env=<id>``
    (0 when the step drew none of its tasks) and, when it has episodes, ``reward/env=<id>`` (mean
    episode reward, as ``reward``) and ``success/env=<id>`` (the fraction whose outcome return
    reaches ``--recipes.success-threshold``, over the episodes without an infra_error)."""
    out: dict[str, float] = {}
    for env in env_ids if len(env_ids) > 1 else ():
        mine = [t for t in trajs if t.env_id == env]
        out[f"episodes/env={env}"] = float(len(mine))
        if not mine:
            continue
        out[f"reward/env={env}"] = sum(t.total_reward for t in mine) / len(mine)
        scored = [t for t in mine if not t.infra_error]
        if scored:
            wins = sum(outcome_and_process(t, outcome_terms)[0] >= threshold for t in scored)
            out[f"success/env={env}"] = wins / len(scored)
    return out


def judge_usage(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Per judge: mean seconds a verdict took and tokens it spent, over the turns it scored
    (``info["judge"][name]``; ``judge/<name>/latency_s``, ``judge/<name>/tokens``), and, for a judge
    that gave any, how many verdicts its model answered unreadably (``judge/<name>/unusable``: each
    scored the minimum, so a judge model that has stopped answering in its format shows here)."""
    latency: dict[str, list[float]] = {}
    tokens: dict[str, float] = {}
    unusable: dict[str, float] = {}
    for t in trajs:
        for turn in t.turns:
            judged = turn.info.get("judge")
            for name, d in judged.items() if isinstance(judged, dict) else ():
                if isinstance(d, dict):
                    latency.setdefault(name, []).append(float(d.get("latency_s") or 0.0))
                    tokens[name] = tokens.get(name, 0.0) + float(d.get("tokens") or 0)
                    if d.get("unusable"):
                        unusable[name] = unusable.get(name, 0.0) + 1.0
    out = {f"judge/{name}/unusable": n for name, n in unusable.items()}
    for name, xs in latency.items():
        out[f"judge/{name}/latency_s"] = sum(xs) / len(xs)
        out[f"judge/{name}/tokens"] = tokens[name]
    return out


class ExclusionBudget:
    """Stops a run whose turns are mostly excluded (``infra_error``): a broken judge server, sandbox
    or retriever must not look like a run that trained.

    Args:
        max_fraction: the largest fraction of turns that may be excluded over the run so far.
        min_turns: turns seen before the fraction is checked (one bad first step is not a verdict).
    """

    def __init__(self, max_fraction: float, min_turns: int = 16):
        self.max_fraction, self.min_turns = max_fraction, min_turns
        self.turns = self.excluded = 0

    def add(self, trajs: Sequence[Trajectory], values: dict[str, float]) -> None:
        """Count this step's turns; adds ``excluded_turns_frac`` (the run's so far) to ``values``."""
        self.turns += sum(len(t.turns) for t in trajs)
        self.excluded += sum(turn.status == "infra_error" for t in trajs for turn in t.turns)
        values["excluded_turns_frac"] = self.excluded / max(self.turns, 1)

    def check(self, step: int) -> None:
        """Raise :class:`InfraError` when more than ``max_fraction`` of the turns were excluded."""
        if self.turns >= self.min_turns and self.excluded > self.max_fraction * self.turns:
            raise InfraError(
                f"{self.excluded} of {self.turns} turns ({self.excluded / self.turns:.0%}) by step {step} were "
                "excluded as infra_error (a judge, sandbox or retriever failed; see info['judge'] and the logs): "
                f"the run stops instead of training on the rest. Fix the service, or raise "
                f"--max-excluded-fraction (now {self.max_fraction:g})."
            )


class MetricsLog:
    """Appends one JSON line per step to ``<out>/metrics.jsonl`` (and TensorBoard when asked).

    Args:
        out_dir: the run directory.
        tensorboard: also write TensorBoard scalars when ``torch.utils.tensorboard`` works.
        trackers: started experiment trackers (:func:`prm_gym.training.trackers.open_trackers`),
            given every row; closed with the log.
        keep_until: on resume, lines with ``step`` above this are dropped first.
    """

    def __init__(
        self,
        out_dir: str | Path,
        tensorboard: bool = False,
        keep_until: int | None = None,
        trackers: Sequence[Any] = (),
    ):
        self.path = Path(out_dir) / METRICS
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if keep_until is not None and self.path.exists():
            rows = [r for r in read_metrics(self.path) if int(r.get("step", 0)) <= keep_until]
            tmp = self.path.with_suffix(".jsonl.tmp")  # atomic: a kill here must not lose the log
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
            os.replace(tmp, self.path)
        elif keep_until is None:
            self.path.write_text("")
        self._tb: Any = None
        self.trackers = list(trackers)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(out_dir) / "tb"))
            except Exception:  # TensorBoard not installed: jsonl and plots only
                self._tb = None

    def log(self, step: int, values: Mapping[str, float]) -> None:
        row = {"step": step, **{k: float(v) for k, v in values.items()}}
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for k, v in values.items():
                if math.isfinite(float(v)):
                    self._tb.add_scalar(k, float(v), step)
        for tracker in self.trackers:
            tracker.log(step, {k: float(v) for k, v in values.items()})

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        for tracker in self.trackers:
            tracker.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl file (a file or a run directory)."""
    p = Path(path)
    if p.is_dir():
        p = p / METRICS
    lines = [line for line in p.read_text().splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise
            # a process killed mid-append leaves a torn last line: that step is redone on resume
    return rows


def plot_metrics(out_dir: str | Path) -> list[Path]:
    """Write ``reward.png`` (total and per term), ``success.png`` (held-out, when evaluated), ``envs.png``
    (a mixture's reward and success per env) and ``staleness.png``; returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_metrics(out_dir) if "reward" in r]
    out: list[Path] = []
    if not rows:
        return out
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [r["reward"] for r in rows], label="total", linewidth=2)
    for key in sorted({k for r in rows for k in r if k.startswith("reward/") and not k.startswith("reward/env=")}):
        ax.plot(steps, [r.get(key, float("nan")) for r in rows], label=key[7:], alpha=0.8)
    evals = [r for r in read_metrics(out_dir) if "eval/reward" in r]
    if evals:
        ax.plot([r["step"] for r in evals], [r["eval/reward"] for r in evals], "o--", label="held-out")
    ax.set(xlabel="step", ylabel="mean episode reward", title="reward")
    ax.legend(fontsize=8)
    out.append(save_figure(fig, Path(out_dir) / "reward.png"))
    if any("eval/success" in r for r in evals):
        out.append(_success_plot(plt, [r for r in evals if "eval/success" in r], Path(out_dir) / "success.png"))
    envs = sorted({k[len("episodes/env=") :] for r in rows for k in r if k.startswith("episodes/env=")})
    if envs:
        out.append(_env_plot(plt, rows, evals, envs, Path(out_dir) / "envs.png"))
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(steps, [r.get("staleness_mean", 0.0) for r in rows], label="mean")
    ax.plot(steps, [r.get("staleness_max", 0.0) for r in rows], label="max")
    ax.set(xlabel="step", ylabel="policy versions", title="staleness")
    ax.legend(fontsize=8)
    out.append(save_figure(fig, Path(out_dir) / "staleness.png"))
    return out


def _success_plot(plt: Any, evals: list[dict[str, Any]], path: Path) -> Path:
    """Held-out success over the steps, with a binomial standard-error band over the scored tasks."""
    steps = [r["step"] for r in evals]
    p = [r["eval/success"] for r in evals]
    n = [max(r.get("eval/tasks_scored", 1.0), 1.0) for r in evals]
    se = [math.sqrt(max(x * (1 - x), 0.0) / k) for x, k in zip(p, n, strict=True)]
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.errorbar(steps, p, yerr=se, fmt="o-", capsize=3)
    ax.set(xlabel="step", ylabel="held-out success", title="success (± 1 s.e.)", ylim=(0, 1))
    return save_figure(fig, path)


def _env_plot(plt: Any, rows: list[dict[str, Any]], evals: list[dict[str, Any]], envs: list[str], path: Path) -> Path:
    """A mixture's envs side by side: training reward and success per env, held-out success per env."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for env in envs:
        mine = [r for r in rows if f"reward/env={env}" in r]
        left.plot([r["step"] for r in mine], [r[f"reward/env={env}"] for r in mine], ".-", label=env)
        wins = [r for r in rows if f"success/env={env}" in r]
        line = right.plot([r["step"] for r in wins], [r[f"success/env={env}"] for r in wins], ".-", label=env)
        held = [r for r in evals if f"eval/success/env={env}" in r]
        if held:
            colour = line[0].get_color()
            xs, ys = [r["step"] for r in held], [r[f"eval/success/env={env}"] for r in held]
            right.plot(xs, ys, "o--", color=colour, label=f"{env} held-out")
    left.set(xlabel="step", ylabel="mean episode reward", title="reward per env")
    right.set(xlabel="step", ylabel="success rate", title="success per env", ylim=(-0.05, 1.05))
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    return save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> Path:
    """Lay ``fig`` out, write it to ``path`` (its folder made if missing) at 90 dpi, and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


class Progress:
    """A tqdm bar showing reward, staleness and tokens/s (silent when disabled)."""

    def __init__(self, total: int, initial: int = 0, enabled: bool = True):
        self._bar: Any = None
        if shown(enabled):  # --no-progress, PRM_GYM_PROGRESS and a terminal decide (prm_gym.core.progress)
            self._bar = bar(total, "train", "step", delay=0.0, initial=initial, leave=True)

    def update(self, values: Mapping[str, float]) -> None:
        if self._bar is None:
            return
        self._bar.set_postfix(
            reward=f"{values.get('reward', 0.0):.3f}",
            stale=f"{values.get('staleness_mean', 0.0):.1f}",
            tok_s=f"{values.get('tokens_per_s', 0.0):.0f}",
        )
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
