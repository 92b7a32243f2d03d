"""``make learn``'s base evaluation, episodes per second: our sampler against its own earlier paths.

Usage::

    python benchmarks/bench_eval.py [--policy hf:smollm2-135m] [--tasks 50] [--rounds 1] [--floor-rows 50,200]

The workload is ``make learn``'s base evaluation itself (``experiments.learn.play`` with the
few-shot prompt): SmolLM2-135M as shipped sampling from its bfloat16 copy, prm/Math-v0 levels 5-6
held-out phrasings (test split), greedy, at most 4 turns x 48 new ids with the calculator, 50
episodes batched (make learn's ``--chunk``), 2 torch threads. The few-shot prompt is 453 ids and the
base model answers almost nothing, so most episodes run their 4 turns over a context of 450-650 ids.
The sides, alternated in one process on the same weights, tasks and seeds:

* ``ours`` (the library's default);
* ``copied``: the few-shot prefix the rows share copied into every row's KV cache and read once
  per row, instead of held once and read once for the batch (:mod:`prm_gym.agents.shared_prefix`);
* ``cat``: the KV cache grown by transformers' ``DynamicCache`` (a ``torch.cat`` of the whole layer
  every step) instead of :mod:`prm_gym.agents.kv_cache`'s buffers with room for the call's ids (and
  so, as it needs those, the prefix copied too);
* ``unpacked``: rows whose turn has stopped stay in the batch until every row of the call has
  stopped (``prm_gym.agents.hf.COMPACT_AT = 0``);
* ``recompute``: no prefix reuse (``HFPolicy(reuse_prefixes=False)``), every turn prefilled whole.

All sides compute the same attention (tests check the paths agree), greedy. ``ours`` and
``unpacked`` hold the shared prefix once and merge attention over it and over the rest through
their log-sum-exps; ``copied``, ``cat`` and ``recompute`` copy it into the rows, which rounds
bfloat16 differently, so a near-tie may rarely pick another id and the printed successes may differ
by an episode or two. Printed beside them: sampling alone (the time inside the sampler's
``generate`` calls, clocked in the ``ours`` evaluations) and a floor: the ids the evaluation
sampled, at the time a decode step of the same batch takes with a 16-id context (weights only, no
attention to speak of), as if every step ran full rows. No sampler on this machine can beat that
floor with these weights and this batch.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from result_line import emit, median, spread

ROOT = Path(__file__).resolve().parent.parent


def decode_floor(model: object, rows: int, steps: int = 8) -> float:
    """Seconds of one decode step of ``rows`` rows over a 16-id context (bf16, a KV cache)."""
    import torch

    from prm_gym.agents.hf import _cache_arg, _cache_of

    with torch.no_grad():
        ids = torch.randint(100, 1000, (rows, 16))
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)  # type: ignore[operator]
        past, tok = _cache_of(out), torch.randint(100, 1000, (rows, 1))
        t0 = time.perf_counter()
        for s in range(steps):
            out = model(input_ids=tok, position_ids=torch.full((rows, 1), 16 + s), use_cache=True,  # type: ignore[operator]
                        **{_cache_arg(model): past})  # fmt: skip
            past = _cache_of(out)
        return (time.perf_counter() - t0) / steps


def _batch_sizes(text: str) -> list[int]:
    """``--floor-rows``: comma-separated positive integers."""
    try:
        sizes = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        sizes = [0]
    if any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError(f"takes comma-separated positive integers, got {text!r}")
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="hf:smollm2-135m")
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sides", default="ours,copied,cat,unpacked,recompute", help="comma-separated; ours always runs")
    ap.add_argument(
        "--floor-rows",
        type=_batch_sizes,
        default=[],
        help="comma-separated batch sizes: also print the floor's decode step at each (ms a step, ms a row)",
    )
    args = ap.parse_args()
    sides = ["ours"] + [s for s in args.sides.split(",") if s and s != "ours"]
    known = ("ours", "copied", "cat", "unpacked", "recompute")
    unknown = set(sides) - set(known)
    if unknown or args.tasks < 1 or args.rounds < 1:
        ap.error(f"--sides takes {', '.join(known)} (got {sorted(unknown)}); --tasks, --rounds >= 1")

    import torch

    sys.path.insert(0, str(ROOT))
    import prm_gym.agents.hf as hf
    import prm_gym.agents.kv_cache as kv_cache
    from experiments import learn

    torch.set_num_threads(2)
    study = learn.parse_args(["--eval-tasks", str(args.tasks), "--policy", args.policy])
    model, tok = learn.load_hf(args.policy, study.seed)
    spent = {"s": 0.0, "ids": 0}

    def policy_class(side: str) -> type:
        class Clocked(hf.HFPolicy):
            def __init__(self, *a, **k):  # type: ignore[no-untyped-def]
                super().__init__(*a, reuse_prefixes=side != "recompute", **k)

            def generate(self, prompts, params):  # type: ignore[no-untyped-def]
                t = time.perf_counter()
                try:
                    out = super().generate(prompts, params)
                    spent["ids"] += sum(len(g.token_ids) for g in out)
                    return out
                finally:
                    spent["s"] += time.perf_counter() - t

        return Clocked

    packed_at, new_cache, splits = hf.COMPACT_AT, kv_cache.new_cache, hf._splits
    rates: dict[str, list[float]] = {s: [] for s in sides}
    success: dict[str, list[int]] = {s: [] for s in sides}
    alone: list[float] = []
    sampled_ids = 0
    for _ in range(args.rounds):
        for side in [*sides[1:], "ours"]:
            hf.COMPACT_AT = 0.0 if side == "unpacked" else packed_at
            kv_cache.new_cache = (lambda *a, **k: None) if side == "cat" else new_cache  # type: ignore[assignment]
            hf._splits = (lambda model: False) if side == "copied" else splits  # type: ignore[assignment]
            learn.HFPolicy = policy_class(side)  # type: ignore[attr-defined]
            spent.update(s=0.0, ids=0)
            t0 = time.perf_counter()
            recs = learn.play(model, tok, study, "templates", 0.0, study.seed + 10_000, fewshot=True)
            seconds = time.perf_counter() - t0
            rates[side].append(len(recs) / seconds)
            success[side].append(sum(r["lenient"] for r in recs))
            if side == "ours":
                alone.append(len(recs) / spent["s"])
                sampled_ids = spent["ids"]
            print(f"{side}: {len(recs)} episodes in {seconds:.1f} s, lenient successes {success[side][-1]}", flush=True)
    hf.COMPACT_AT, kv_cache.new_cache, hf._splits = packed_at, new_cache, splits  # type: ignore[assignment]
    fast = hf.HFPolicy(model, tok, sample_dtype="bfloat16").sampler_model()
    rows = min(study.chunk, args.tasks)
    step = min(decode_floor(fast, rows) for _ in range(3))
    floor = args.tasks / (sampled_ids / rows * step)
    print(
        f"{args.policy}, bf16 sampler, make learn's base evaluation (few-shot prompt, held-out phrasings, greedy), "
        f"4 turns x 48 ids, {args.tasks} episodes in chunks of {study.chunk}, 2 threads, CPU, {args.rounds} round(s)"
    )
    print("| sampler | episodes/s | lenient successes |\n|---|---|---|")
    for side in sides:
        print(f"| {side} | {median(rates[side]):.3f} | {success[side]} |")
    print(f"sampling alone (ours): {median(alone):.3f} episodes/s")
    print(
        f"floor: {sampled_ids} sampled ids / {rows} rows x {step * 1e3:.0f} ms a 16-id-context decode step = "
        f"{floor:.3f} episodes/s; 200 episodes: ours {200 / median(rates['ours']):.0f} s, floor {200 / floor:.0f} s"
    )
    for n in args.floor_rows:
        at = min(decode_floor(fast, n) for _ in range(3))
        print(
            f"floor at {n} rows: {at * 1e3:.1f} ms a 16-id-context decode step, {at * 1e3 / n:.2f} ms a row; "
            f"these {sampled_ids} ids in batches of {n}: {sampled_ids / n * at:.0f} s for {args.tasks} episodes"
        )
    names = {
        "copied": "the same evaluation with the shared few-shot prefix copied into every row",
        "cat": "the same evaluation with transformers' DynamicCache (torch.cat every step)",
        "unpacked": "the same evaluation keeping every row in the batch until all have stopped",
        "recompute": "the same evaluation prefilling every turn whole",
    }
    ours = rates["ours"]
    for side in sides[1:]:
        theirs = rates[side]
        emit("eval", f"make-learn base evaluation vs {side} (episodes/s)", median(ours), median(theirs),
             names[side], "episodes/s", "higher", spread=f"ours {spread(ours)}, baseline {spread(theirs)}")  # fmt: skip
    emit("eval", "make-learn base evaluation against its sampling alone (episodes/s)", median(ours), median(alone),
         "the same evaluation's generate calls alone (clocked inside it)", "episodes/s", "higher",
         spread=f"ours {spread(ours)}, baseline {spread(alone)}")  # fmt: skip


if __name__ == "__main__":
    main()
