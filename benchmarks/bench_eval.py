"""Held-out evaluation speed of ``make learn``'s base model: prefix reuse on vs off.

Usage::

    python benchmarks/bench_eval.py [--policy hf:smollm2-135m] [--tasks 64] [--rounds 1]

The workload is ``make learn``'s base evaluation (:func:`prm_gym.training.evaluation.evaluate`):
SmolLM2-135M as shipped sampling from its bfloat16 copy, prm/Math-v0 levels 1-2 test tasks, three
turns with the calculator, 48 new ids a turn, temperature 1, one episode per task, 32 episodes
batched at once, 2 torch threads. SmolLM2 as shipped answers almost nothing, so most episodes run
to the turn limit. The two sides, alternated in one process on the same weights and seeds:

* ``reuse`` (the library's default): each episode's next turn prefills only its new ids (the last
  call's KV cache is kept) and distinct prompts prefill their common system prompt once;
* ``recompute`` (``HFPolicy(reuse_prefixes=False)``, the sampler before): every turn prefills the
  episode's whole context, distinct prompts separately;
* ``unpacked`` (reuse on, ``prm_gym.agents.hf.COMPACT_AT = 0``): rows whose turn has stopped stay in
  the batch until every row of the call has stopped, as before #34; ``reuse`` drops them once at
  most half the batch is still sampling. The two sample the same ids (a test checks it).

Printed: episodes/s of each side and the success each measured (the same tasks and seeds; success
figures agree within sampling noise, not bit for bit: reuse changes floating-point rounding).

A second row (#34 item 2, evaluation against sampling alone): in the ``reuse`` evaluations the time
spent inside the sampler's ``generate`` calls is clocked; "sampling alone" is the episodes over
that time, i.e. what the evaluation would reach if envs, parsing, judging, chat rendering and
bookkeeping cost nothing. The ratio is the share of the evaluation's wall clock that is sampling.
"""

from __future__ import annotations

import argparse
import json
import time

from result_line import emit, median, spread


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="hf:smollm2-135m")
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()

    import torch

    from prm_gym.agents.chat import ChatTemplate
    from prm_gym.agents.hf import HFPolicy
    from prm_gym.core.models import load_hf
    from prm_gym.training.config import EvalConfig, SamplingConfig, TrainConfig
    from prm_gym.training.evaluation import InProcess, evaluate

    torch.set_num_threads(2)
    model, tok = load_hf(args.policy)
    chat = ChatTemplate(tok, tools_block="compact")
    cfg = TrainConfig(
        env="prm/Math-v0",
        env_kwargs=json.dumps({"levels": [1, 2], "max_turns": 3, "num_tasks": 2000}),
        policy=args.policy,
        tools_prompt="compact",
        precision="bf16",
        progress=False,
        sampling=SamplingConfig(max_new_tokens=48, temperature=1.0, max_context_tokens=1024),
        eval=EvalConfig(env_kwargs='{"split": "test"}', num_tasks=args.tasks, samples=1, temperature=1.0),
    )

    class Clocked(HFPolicy):
        """HFPolicy that adds the seconds spent in ``generate`` to ``spent``."""

        spent = 0.0

        def generate(self, prompts, params):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return super().generate(prompts, params)
            finally:
                Clocked.spent += time.perf_counter() - t

    sampling_alone: list[float] = []
    import prm_gym.agents.hf as hf

    packed_at = hf.COMPACT_AT
    rates: dict[str, list[float]] = {"reuse": [], "recompute": [], "unpacked": []}
    success: dict[str, list[float]] = {"reuse": [], "recompute": [], "unpacked": []}
    for _ in range(args.rounds):
        for side in ("recompute", "unpacked", "reuse"):
            hf.COMPACT_AT = 0.0 if side == "unpacked" else packed_at
            policy = Clocked(model, tok, seed=cfg.seed + 7919, sample_dtype="bfloat16", reuse_prefixes=side == "reuse")
            here = InProcess(policy, chat, cfg)  # plays with this policy as it is (clocked)
            Clocked.spent = 0.0
            t0 = time.perf_counter()
            out = evaluate(policy, chat, cfg, here)
            seconds = time.perf_counter() - t0
            here.close()
            if side == "reuse":
                sampling_alone.append(args.tasks / Clocked.spent)
            rates[side].append(args.tasks / seconds)
            success[side].append(out["success"])
            print(
                f"{side}: {args.tasks} episodes in {seconds:.1f} s ({out['episodes_per_s']:.2f} episodes/s "
                f"reported), success {out['success']:.3f}",
                flush=True,
            )
    print(
        f"{args.policy}, bf16 sampler, prm/Math-v0 levels 1-2 test split, 3 turns x 48 ids, T=1, "
        f"{args.tasks} episodes in chunks of 32, 2 threads, CPU"
    )
    print("| sampler | episodes/s | success |")
    print("|---|---|---|")
    for side in rates:
        print(f"| {side} | {median(rates[side]):.2f} | {median(success[side]):.3f} |")
    print(f"sampling alone (reuse): {median(sampling_alone):.2f} episodes/s")
    rows = [
        ("make-learn base evaluation (SmolLM2-135M, episodes/s)", rates["recompute"],
         "the same evaluation prefilling every turn whole"),
        ("make-learn base evaluation, finished rows leave the batch (episodes/s)", rates["unpacked"],
         "the same evaluation keeping every row in the batch until all have stopped"),
        ("make-learn base evaluation against its sampling alone (episodes/s)", sampling_alone,
         "the same evaluation's generate calls alone (clocked inside it)"),
    ]  # fmt: skip
    for row, baseline, name in rows:
        ours = rates["reuse"]
        emit("eval", row, median(ours), median(baseline), name, "episodes/s", "higher",
             spread=f"ours {spread(ours)}, baseline {spread(baseline)}")  # fmt: skip


if __name__ == "__main__":
    main()
