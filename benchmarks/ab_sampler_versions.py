"""``python benchmarks/ab_sampler_versions.py --base <commit>``: the HF sampler against its own
earlier version (a commit): does a change keep the CPU's speed?

Both versions' ``HFPolicy`` sample the same two-turn episodes (make learn-like word problems in
SmolLM2-135M's chat template, 32 rows: 4 problems x 8, a tool result between the turns, 64 new
tokens a turn, temperature 1) with the same model object, seed and threads, in alternated rounds
(base first in even rounds, ours first in odd ones). The base's ``prm_gym/agents/hf.py`` is read
with ``git show <base>:prm_gym/agents/hf.py`` and imported beside ours (it shares the rest of the
package). Each round prints both sides' seconds and generated tokens (equal when the two versions
draw the same ids, which they do on a CPU); the summary is medians, min-max, and ours/base.

Measured: docs/benchmarks.md, "The sampler and the learner on a GPU (issue #43)".
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def base_module(commit: str) -> ModuleType:
    """``prm_gym/agents/hf.py`` as of ``commit``, imported under another name."""
    text = subprocess.run(
        ["git", "show", f"{commit}:prm_gym/agents/hf.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "hf_base.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("hf_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the commit whose sampler is the baseline")
    p.add_argument("--policy", default="hf:smollm2-135m")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-new", type=int, default=64)
    args = p.parse_args(argv)
    import torch

    from prm_gym.agents import hf
    from prm_gym.core.models import load_hf
    from prm_gym.core.policy import SamplingParams

    torch.set_num_threads(args.threads)
    base = base_module(args.base)
    model, tok = load_hf(args.policy, 0)
    model.eval()
    system = "You solve math word problems with a calculator tool. Answer inside <answer></answer>."
    chat = lambda q: tok.apply_chat_template(  # noqa: E731
        [{"role": "system", "content": system}, {"role": "user", "content": q}],
        tokenize=False,
        add_generation_prompt=True,
    )
    problems = [(12, 5, 3), (40, 17, 9), (7, 8, 2), (100, 23, 45)]
    text = "A farmer has {} sheep and buys {} more. Then {} run away. How many are left?"
    prompts = [tok.encode(chat(text.format(*p))) for p in problems for _ in range(8)]
    result = tok.encode("\n<tool_response>42</tool_response>\n")
    params = SamplingParams(max_new_tokens=args.max_new, temperature=1.0)
    times: dict[str, list[float]] = {"base": [], "ours": []}
    for r in range(args.rounds):
        sides = [("base", base), ("ours", hf)]
        for name, module in sides if r % 2 == 0 else sides[::-1]:
            policy = module.HFPolicy(model, tok, seed=r)
            t0 = time.perf_counter()
            first = policy.generate(prompts, params)
            second = policy.generate([p + g.token_ids + result for p, g in zip(prompts, first, strict=True)], params)
            times[name].append(time.perf_counter() - t0)
            tokens = sum(len(g.token_ids) for g in first + second)
            print(f"round {r} {name}: {times[name][-1]:.2f} s, {tokens} tokens", flush=True)
    for name, v in times.items():
        print(f"{name}: median {statistics.median(v):.2f} s ({min(v):.2f}-{max(v):.2f})")
    ratio = statistics.median(times["ours"]) / statistics.median(times["base"])
    print(
        f"ours/base (time, lower is faster): {ratio:.3f}; {args.threads} threads, same model object, seeds and prompts"
    )


if __name__ == "__main__":
    sys.exit(main())
