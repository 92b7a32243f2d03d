"""Memory of one learner update, full fine-tuning vs LoRA (docs/training.md, "LoRA").

Usage::

    python benchmarks/bench_lora_memory.py [--policy hf:smollm2-135m] [--rank 16] [--rows 4] [--tokens 256]

Each mode runs in its own fresh process (peak RSS only grows within a process): load the policy
as ``train-agent`` does (``--lora.rank`` adds the adapters the same way), then one AdamW step on
a policy-gradient-shaped loss over ``rows`` x ``tokens`` random token ids. Printed per mode:
trainable parameters, the bytes of their gradients and of AdamW's moments (counted from the
tensors), and the process's resident memory after loading and at its peak.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from typing import Any


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        line = next(x for x in fh if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def measure(policy: str, rank: int, rows: int, tokens: int) -> dict[str, Any]:
    """One update in this process; the figures for ``rank`` (0: full fine-tuning)."""
    import torch

    from prm_gym.core.models import load_hf
    from prm_gym.training.config import LoraConfig
    from prm_gym.training.lora import add_lora, trainable
    from prm_gym.training.losses import token_logprobs

    torch.manual_seed(0)
    model, _ = load_hf(policy)
    if rank:
        model = add_lora(model, LoraConfig(rank=rank))
    params = trainable(model)
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    loaded = _rss_mib()
    ids = torch.randint(0, model.config.vocab_size, (rows, tokens))
    model.train()
    lp = token_logprobs(model(input_ids=ids).logits, ids)
    (-lp.mean()).backward()
    optimizer.step()
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    moments = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
    return {
        "mode": f"LoRA r={rank}" if rank else "full",
        "params_total": sum(p.numel() for p in model.parameters()),
        "params_trainable": sum(p.numel() for p in params),
        "grad_mib": nbytes([p.grad for p in params if p.grad is not None]) / 2**20,
        "adam_state_mib": nbytes(moments) / 2**20,
        "rss_loaded_mib": loaded,
        "rss_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="hf:smollm2-135m")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # child: measure this rank
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.policy, args.one, args.rows, args.tokens)))
        return
    base = [sys.executable, __file__, "--policy", args.policy, "--rows", str(args.rows), "--tokens", str(args.tokens)]
    results = []
    for rank in (0, args.rank):
        out = subprocess.run([*base, "--one", str(rank)], capture_output=True, text=True, check=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.policy}, one AdamW step on {args.rows} x {args.tokens} tokens, fp32, CPU")
    print("| mode | trainable params | grads MiB | AdamW moments MiB | RSS loaded MiB | RSS peak MiB |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['mode']} | {r['params_trainable']:,} of {r['params_total']:,} | {r['grad_mib']:.1f} | "
            f"{r['adam_state_mib']:.1f} | {r['rss_loaded_mib']:.0f} | {r['rss_peak_mib']:.0f} |"
        )
    full, lora = results
    saved = full["grad_mib"] + full["adam_state_mib"] - lora["grad_mib"] - lora["adam_state_mib"]
    peak = full["rss_peak_mib"] - lora["rss_peak_mib"]
    print(f"grads + AdamW moments saved: {saved:.1f} MiB; peak RSS saved: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
