"""Proof that the trainer learns: a short SFT warm start, then GRPO on prm/Math-v0, on CPU.

``make learn`` (``python -m prm_gym.training.learn``) runs, in a few minutes on 2 CPU cores:

1. **SFT warm start** (reported as such): a small Llama-architecture model, randomly
   initialised, with the byte-level tokenizer, is trained by cross-entropy on generated
   demonstrations played through the real env. 90% of them use the calculator (copy the
   expression, then copy the tool result into ``<answer>``), 10% guess an answer directly
   (almost always wrong). The warm-started policy therefore mixes both behaviours and copies
   imperfectly.
2. **GRPO** through the real env, judge and trainer (:func:`prm_gym.training.trainer.train`): the
   outcome reward alone must teach the policy to prefer the calculator and to copy exactly.
3. Held-out reward (level-1 test split, 32 tasks x 4 samples) before and after GRPO, with
   standard errors, and ``reward.png`` in the output directory.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.models import tiny_model, tiny_tokenizer
from prm_gym.training.config import EvalConfig, LossConfig, SamplingConfig, TrainConfig

ENV_KWARGS: dict[str, Any] = {"levels": [1], "max_turns": 3, "num_tasks": 2000}


def _demo_actions(question: str, rng: np.random.Generator, use_tool: bool) -> list[str]:
    """The assistant turns of one demonstration (the tool result is filled in while playing)."""
    if not use_tool:
        return [f"<answer>{int(rng.integers(0, 200))}</answer>"]
    match = re.search(r"What is (.+)\?", question)
    expr = match.group(1) if match else "0"
    call = json.dumps({"name": "calculator", "arguments": {"expression": expr}})
    return [f"<tool_call>{call}</tool_call>", "<answer>{result}</answer>"]


def demonstrations(
    chat: ChatTemplate, n: int, seed: int, tool_fraction: float = 0.5
) -> list[tuple[list[int], list[int]]]:
    """``n`` ``(token_ids, loss_mask)`` demonstrations played through prm/Math-v0 (train split)."""
    env = gym.make("prm/Math-v0", **ENV_KWARGS)
    ids = list(getattr(env.unwrapped, "tasks").ids)  # noqa: B009  (ToolEnv attribute)
    rng = np.random.default_rng(seed)
    eos = chat.eos_token_id
    out = []
    for k in range(n):
        obs, info = env.reset(seed=k, options={"task_id": ids[k % len(ids)]})
        tokens, mask = chat.prompt_ids(obs, info["tools"]), []
        mask = [0] * len(tokens)
        result = ""
        for action in _demo_actions(obs, rng, bool(rng.random() < tool_fraction)):
            sampled = [*chat.encode(action.replace("{result}", result)), eos]
            tokens += sampled
            mask += [1] * len(sampled)
            obs, _, term, trunc, _ = env.step(chat.tokenizer.decode(sampled, skip_special_tokens=True))
            found = re.search(r"<tool_response>\s*(.*?)\s*</tool_response>", obs, re.S)
            result = found.group(1) if found else ""
            if term or trunc:
                break
            nxt = chat.observation_ids(obs, sampled)
            tokens += nxt
            mask += [0] * len(nxt)
        out.append((tokens, mask))
    env.close()
    return out


def sft(model: Any, demos: list[tuple[list[int], list[int]]], steps: int, lr: float, batch: int, seed: int) -> float:
    """Cross-entropy on the demonstrations' assistant tokens; returns the last loss."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(0.0)
    for step in range(steps):
        rows = [demos[int(i)] for i in torch.randint(len(demos), (batch,), generator=gen)]
        width = max(len(t) for t, _ in rows)
        ids = torch.zeros(batch, width, dtype=torch.long)
        mask = torch.zeros(batch, width)
        attn = torch.zeros(batch, width, dtype=torch.long)
        for b, (t, m) in enumerate(rows):
            ids[b, : len(t)], mask[b, : len(m)], attn[b, : len(t)] = torch.tensor(t), torch.tensor(m), 1
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        )
        loss = (ce * mask[:, 1:].reshape(-1)).sum() / mask[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            print(f"SFT step {step}/{steps}: loss {float(loss.detach()):.3f}", flush=True)
    model.eval()
    return float(loss.detach())


def warm_start(out: Path, args: argparse.Namespace) -> Path:
    """Train and save the SFT warm-start model (a transformers directory) under ``out/sft``."""
    tok = tiny_tokenizer()
    chat = ChatTemplate(tok, tools_block="compact")
    model = tiny_model(len(tok), seed=args.seed, hidden=args.hidden, layers=args.layers, heads=4)
    demos = demonstrations(chat, args.demos, args.seed, tool_fraction=args.tool_fraction)
    loss = sft(model, demos, args.sft_steps, args.sft_lr, args.sft_batch, args.seed)
    print(f"SFT warm start: {args.demos} demonstrations, {args.sft_steps} steps, final loss {loss:.3f}")
    path = out / "sft"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def learn_config(policy_dir: Path, out: Path, args: argparse.Namespace) -> TrainConfig:
    """The GRPO run of the proof: level-1 Math-v0, outcome reward, compact tools prompt."""
    return TrainConfig(
        env="prm/Math-v0",
        env_kwargs=json.dumps(ENV_KWARGS),
        policy=f"hf:{policy_dir}",
        tools_prompt="compact",
        group_size=args.group_size,
        tasks_per_step=args.tasks_per_step,
        steps=args.steps,
        lr=args.lr,
        output_dir=str(out / "grpo"),
        seed=args.seed,
        checkpoint_every=0,
        tensorboard=False,
        sampling=SamplingConfig(max_new_tokens=96, temperature=1.0, max_context_tokens=1024),
        loss=LossConfig(micro_batch_size=16),
        eval=EvalConfig(env_kwargs='{"split": "test"}', num_tasks=args.eval_tasks, samples=4),
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", default="runs/learn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--demos", type=int, default=2000)
    p.add_argument("--sft-steps", type=int, default=1200)
    p.add_argument("--tool-fraction", type=float, default=0.9, help="share of demonstrations that use the tool")
    p.add_argument("--sft-lr", type=float, default=3e-3)
    p.add_argument("--sft-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--tasks-per-step", type=int, default=4)
    p.add_argument("--eval-tasks", type=int, default=32)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the proof; print and return the initial and final held-out reward."""
    from prm_gym.training.trainer import train

    args = parse_args(argv)
    torch.set_num_threads(1)  # 2 threads on 2 shared cores is slower (contention)
    out = Path(args.output_dir)
    t0 = time.perf_counter()
    policy_dir = warm_start(out, args)
    t1 = time.perf_counter()
    cfg = learn_config(policy_dir, out, args)
    train(replace(cfg, progress=False))
    evals = [json.loads(x) for x in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if "eval/reward" in e]
    first, last = evals[0], evals[-1]
    result = {
        "initial_reward": first["eval/reward"],
        "initial_se": first["eval/reward_se"],
        "final_reward": last["eval/reward"],
        "final_se": last["eval/reward_se"],
        "initial_success": first.get("eval/success", float("nan")),
        "final_success": last.get("eval/success", float("nan")),
        "sft_s": t1 - t0,
        "grpo_s": time.perf_counter() - t1,
    }
    (out / "learn.json").write_text(json.dumps(result, indent=2))
    r = result
    print(
        f"held-out reward (after SFT warm start, before GRPO): {r['initial_reward']:.3f} +- {r['initial_se']:.3f}\n"
        f"held-out reward (after {args.steps} GRPO steps):        {r['final_reward']:.3f} +- {r['final_se']:.3f}\n"
        f"held-out success: {r['initial_success']:.1%} -> {r['final_success']:.1%}\n"
        f"SFT {result['sft_s']:.0f} s, GRPO {result['grpo_s']:.0f} s; plot: {out / 'grpo' / 'reward.png'}"
    )
    return result


if __name__ == "__main__":
    main()
