"""Our sampler and learner against the machine's limit: the bare library calls doing the same work.

    .venv/bin/python benchmarks/bench_machine_limit.py [--rounds 3]

The model has SmolLM2-135M's shape (30 Llama layers, hidden 576, vocabulary 49,152), randomly
initialised (nothing is downloaded; a random model almost never samples its end-of-turn id, so
every sequence runs to its length on both sides), fp32, torch's default threads. Both rows
alternate the two sides ``--rounds`` times after one warm-up each and report medians.

* **sampling**: ``HFPolicy.generate`` (ours: temperature 1, per-token log-probabilities returned,
  prefix reuse off so no cache answers ours only) against ``model.generate`` (transformers' own
  sampling loop with its KV cache, ``do_sample``, temperature 1, top-k and top-p off,
  ``min_new_tokens`` = ``max_new_tokens``, left padding), the same ``BATCH`` prompts of ``PROMPT``
  ids and ``NEW`` new tokens a row. Tokens/s counts the ids each side generated. The bare call
  returns no log-probabilities; ours does (the learner needs them).
* **learner**: :func:`prm_gym.training.update.learner_step` (clipped policy-gradient loss on the
  trainable half of each row, micro-batches of ``MICRO``, AdamW) against a bare loop over the same
  micro-batches: forward, log-softmax, gather the trained tokens' log-probabilities, the
  ``-(advantage * log-prob)`` mean, backward, then one AdamW step. Tokens/s counts every id of
  the batch on both sides.

Goal (#34): each at least 0.85x its bare baseline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learner import smollm2_shaped
from result_line import emit, spread

from prm_gym.agents.hf import HFPolicy
from prm_gym.core.policy import SamplingParams
from prm_gym.training.batch import Batch
from prm_gym.training.config import LossConfig
from prm_gym.training.update import learner_step

BATCH, PROMPT, NEW = 8, 128, 64
ROWS, LENGTH, MICRO = 8, 256, 4


class _NoTokenizer:
    """What HFPolicy needs of a tokenizer here: ids only (no end-of-turn id, nothing decoded that matters)."""

    pad_token_id, eos_token_id = 0, -1

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        return ""


def prompts() -> list[list[int]]:
    gen = torch.Generator().manual_seed(1)
    return torch.randint(10, 49000, (BATCH, PROMPT), generator=gen).tolist()


def ours_sampling(model: Any) -> float:
    policy = HFPolicy(model, _NoTokenizer(), seed=0, reuse_prefixes=False)
    t0 = time.perf_counter()
    out = policy.generate(prompts(), SamplingParams(max_new_tokens=NEW, temperature=1.0))
    return sum(len(g.token_ids) for g in out) / (time.perf_counter() - t0)


def bare_sampling(model: Any) -> float:
    ids = torch.tensor(prompts())
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            use_cache=True,
            pad_token_id=0,
        )
    return (out.shape[0] * (out.shape[1] - PROMPT)) / (time.perf_counter() - t0)


def batch() -> Batch:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 49000, (ROWS, LENGTH), generator=gen)
    mask = torch.zeros(ROWS, LENGTH)
    mask[:, LENGTH // 2 :] = 1
    blp = -torch.rand(ROWS, LENGTH, generator=gen) * 5
    adv = torch.randn(ROWS, LENGTH, generator=gen)
    return Batch(
        ids, torch.ones(ROWS, LENGTH, dtype=torch.long), mask, blp, adv, torch.zeros(ROWS, dtype=torch.long), {}
    )


def ours_learner(model: Any, opt: torch.optim.Optimizer, data: Batch) -> float:
    t0 = time.perf_counter()
    learner_step(model, opt, data, LossConfig(micro_batch_size=MICRO))
    return ROWS * LENGTH / (time.perf_counter() - t0)


def bare_learner(model: Any, opt: torch.optim.Optimizer, data: Batch) -> float:
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    total = float(data.loss_mask.sum())
    for lo in range(0, ROWS, MICRO):
        ids, attn = data.input_ids[lo : lo + MICRO], data.attention_mask[lo : lo + MICRO]
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        mask = data.loss_mask[lo : lo + MICRO, 1:]
        loss = -(data.advantages[lo : lo + MICRO, 1:] * logp * mask).sum() / total
        loss.backward()
    opt.step()
    return ROWS * LENGTH / (time.perf_counter() - t0)


def alternate(ours: Any, bare: Any, rounds: int) -> tuple[list[float], list[float]]:
    ours(), bare()  # warm-up
    a, b = [], []
    for _ in range(rounds):
        a.append(ours())
        b.append(bare())
    return a, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    threads = torch.get_num_threads()
    model = smollm2_shaped().eval()
    a, b = alternate(lambda: ours_sampling(model), lambda: bare_sampling(model), args.rounds)
    print(f"sampling: ours {statistics.median(a):,.1f} tokens/s, bare generate {statistics.median(b):,.1f}")
    emit(
        "machine",
        f"sampling, {BATCH} x ({PROMPT} prompt + {NEW} new ids), fp32",
        statistics.median(a),
        statistics.median(b),
        "transformers generate (KV cache, do_sample)",
        "tokens/s",
        "higher",
        spread=f"ours {spread(a)}, baseline {spread(b)}",
        note=f"SmolLM2-135M shape, random weights, {threads} threads, alternated; ours also returns log-probs",
    )
    model.train()
    data = batch()
    opt_a = torch.optim.AdamW(model.parameters(), lr=1e-7)
    a, b = alternate(lambda: ours_learner(model, opt_a, data), lambda: bare_learner(model, opt_a, data), args.rounds)
    print(f"learner: ours {statistics.median(a):,.1f} tokens/s, bare step {statistics.median(b):,.1f}")
    emit(
        "machine",
        f"learner step, {ROWS} x {LENGTH} ids (half trained), micro-batch {MICRO}, fp32",
        statistics.median(a),
        statistics.median(b),
        "bare forward + log-softmax + backward + AdamW",
        "tokens/s",
        "higher",
        spread=f"ours {spread(a)}, baseline {spread(b)}",
        note=f"SmolLM2-135M shape, random weights, {threads} threads, alternated, one optimiser",
    )


if __name__ == "__main__":
    main()
