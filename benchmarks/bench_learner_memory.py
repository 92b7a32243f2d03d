"""Peak resident memory of a ``make learn``-sized learner step, chunked log-probs vs the old path.

Usage::

    python benchmarks/bench_learner_memory.py [--policy hf:smollm2-135m] [--rows 8] [--turns 3] [--steps 2]

The workload is ``make learn``'s GRPO update: SmolLM2-135M (49k vocabulary), a batch of ``rows``
episodes of prm/Math-v0 whose ids are the real system and task prompt of the compact-tools chat
template followed by ``turns`` x (48 sampled ids + a 24-id tool result), micro-batches of 8,
bfloat16 autocast, AdamW, and the sampler's bfloat16 copy of the weights resident beside it, as in
a run. The default is one micro-batch: a run's 32 rows are 4 of them, one after the other, which
add compute but not peak memory (gradients accumulate in place). The sampled ids are random, so
only memory and the agreement of the two paths are meaningful, not the loss itself.

Each path runs in its own fresh process (peak RSS only grows within a process), alternated:
``chunked`` (the library's path: the output layer projects only the trained tokens, a chunk at a
time, recomputed in the backward pass) and ``old`` (the path before it, still taken by a
DDP/FSDP-wrapped model: every trained position of the micro-batch projected at once). Printed per
path: resident memory after loading, the peak over the steps, and each step's loss, which must
agree between the paths.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from result_line import emit, median, spread


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as fh:
        line = next(x for x in fh if x.startswith(key + ":"))
    return int(line.split()[1]) / 1024


def measure(policy: str, path: str, rows: int, turns: int, steps: int, ckpt: bool = False) -> dict[str, Any]:
    """``steps`` learner steps in this process with ``path`` (``ckpt``: with activation checkpointing,
    the chunked path only); memory and losses."""
    import gymnasium as gym
    import torch

    import prm_gym  # noqa: F401  (registers the prm/ ids)
    from prm_gym.agents.chat import ChatTemplate
    from prm_gym.agents.hf import HFPolicy
    from prm_gym.core.models import load_hf
    from prm_gym.training import update
    from prm_gym.training.batch import Batch
    from prm_gym.training.config import LossConfig

    torch.set_num_threads(2)
    if path == "old":
        update._output_layer = lambda _model: None  # type: ignore[assignment]  # the unchunked projection
    model, tok = load_hf(policy)
    HFPolicy(model, tok, sample_dtype="bfloat16").sampler_model()  # the sampler's copy, resident in a run
    chat = ChatTemplate(tok, tools_block="compact")
    env = gym.make("prm/Math-v0", levels=[1, 2], max_turns=3, num_tasks=50, **chat.env_kwargs({}))
    gen = torch.Generator().manual_seed(0)
    seqs, masks = [], []
    for r in range(rows):
        obs, info = env.reset(seed=r)
        ids = list(chat.prompt_ids(obs, info.get("tools", [])))
        mask = [0] * len(ids)
        for _ in range(turns):
            ids += torch.randint(3, len(tok), (48,), generator=gen).tolist()
            mask += [1] * 48
            ids += torch.randint(3, len(tok), (24,), generator=gen).tolist()
            mask += [0] * 24
        seqs.append(ids)
        masks.append(mask)
    env.close()
    width = max(len(s) for s in seqs)
    batch = Batch(
        input_ids=torch.tensor([s + [0] * (width - len(s)) for s in seqs]),
        attention_mask=torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs]),
        loss_mask=torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.float32),
        behaviour_logprobs=torch.full((rows, width), -2.0),
        advantages=torch.randn(rows, width, generator=gen),
        versions=torch.zeros(rows, dtype=torch.long),
        stats={},
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    loaded = _status_mib("VmRSS")
    losses = []
    for _ in range(steps):
        loss_cfg = LossConfig(micro_batch_size=8, activation_checkpointing=ckpt and path == "chunked")
        stats = update.learner_step(model, optimizer, batch, loss_cfg, autocast=True)
        losses.append(stats["loss"])
    return {
        "path": path,
        "rows": rows,
        "width": width,
        "trained_tokens": int(batch.loss_mask.sum()),
        "rss_loaded_mib": loaded,
        "rss_peak_mib": _status_mib("VmHWM"),
        "losses": losses,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="hf:smollm2-135m")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="alternated rounds of both paths")
    ap.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="our side also recomputes activations in the backward pass (train-agent --loss.activation-checkpointing)",
    )
    ap.add_argument("--one", choices=["chunked", "old"], default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        ckpt = args.activation_checkpointing
        print(json.dumps(measure(args.policy, args.one, args.rows, args.turns, args.steps, ckpt)))
        return
    base = [sys.executable, __file__, "--policy", args.policy, "--rows", str(args.rows)]
    base += ["--turns", str(args.turns), "--steps", str(args.steps)]
    base += ["--activation-checkpointing"] if args.activation_checkpointing else []
    results: dict[str, list[dict[str, Any]]] = {"chunked": [], "old": []}
    for _ in range(args.rounds):
        for path in ("old", "chunked"):
            out = subprocess.run([*base, "--one", path], capture_output=True, text=True, check=True).stdout
            results[path].append(json.loads(out.strip().splitlines()[-1]))
    first = results["chunked"][0]
    print(
        f"{args.policy}: {args.steps} GRPO learner steps on {first['rows']} rows x {first['width']} ids "
        f"({first['trained_tokens']} trained), micro-batch 8, bf16 autocast, AdamW, sampler's bf16 copy resident; CPU"
        + ("; ours with activation checkpointing" if args.activation_checkpointing else "")
    )
    print("| path | RSS loaded MiB | RSS peak MiB | losses |")
    print("|---|---|---|---|")
    for path, runs in results.items():
        for r in runs:
            losses = ", ".join(f"{x:.6f}" for x in r["losses"])
            print(f"| {path} | {r['rss_loaded_mib']:.0f} | {r['rss_peak_mib']:.0f} | {losses} |")
    gap = max(abs(a - b) for a, b in zip(first["losses"], results["old"][0]["losses"], strict=True))
    print(f"largest loss difference between the paths: {gap:.2e}")
    ours = [r["rss_peak_mib"] for r in results["chunked"]]
    old = [r["rss_peak_mib"] for r in results["old"]]
    emit(
        "learner_memory",
        "peak RSS of a make-learn learner step (SmolLM2-135M)"
        + (", ours with activation checkpointing" if args.activation_checkpointing else ""),
        median(ours),
        median(old),
        "the same step projecting all trained positions at once",
        "MiB",
        "lower",
        spread=f"ours {spread(ours)}, old {spread(old)}",
        note=f"loss gap {gap:.1e}",
    )


if __name__ == "__main__":
    main()
