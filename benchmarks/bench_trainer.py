"""Trainer tokens/s: prm-gym's GRPO step against TRL's ``GRPOTrainer``, same model and shapes.

Both train the same tiny randomly initialised Llama (``hf:tiny``, byte-level tokenizer) on CPU
with one thread, on the same prompts (``PROMPTS x GENERATIONS`` completions per step,
``COMPLETION`` new tokens at most, temperature 1, no KL, one update per batch), with the same
length reward. A step is: sample the completions, score them, group-relative advantages, one
clipped policy-gradient update. Throughput is (prompt + completion tokens) / step time.

Like for like: gradient checkpointing is off on both sides (TRL's GRPOConfig turns it on by
default, which recomputes activations and costs TRL ~15%; prm-gym's learner does not checkpoint),
and the two trainers run in ``ROUNDS`` alternated rounds (TRL, prm-gym, prm-gym, TRL, ...: each
round a fresh trainer, warm-up steps dropped), so both see the same machine load. Each figure is
the median over rounds of the round's median tokens/s; the spread is min-max over rounds.

    .venv/bin/python benchmarks/bench_trainer.py      # needs the `bench` extra (trl)
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any

import torch

from prm_gym.agents.hf import HFPolicy
from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.core.models import tiny_model, tiny_tokenizer
from prm_gym.core.policy import SamplingParams
from prm_gym.training.batch import Grouping, build_batch
from prm_gym.training.config import LossConfig
from prm_gym.training.update import learner_step

PROMPTS, GENERATIONS, COMPLETION = 4, 8, 64
WARMUP, STEPS = 2, 6
ROUNDS = 3
LR = 1e-4
QUESTIONS = [
    f"Question {i}: what is {i} + {2 * i} * 3? Think, then answer inside <answer></answer>." for i in range(64)
]


def length_reward(text: str) -> float:
    """A cheap deterministic reward so both trainers see the same signal."""
    return float(text.count("a")) / 10.0


def prm_step(policy: HFPolicy, opt: torch.optim.Optimizer, prompts: list[list[int]], cfg: LossConfig) -> int:
    """One prm-gym GRPO step; returns the tokens processed."""
    ids = [p for p in prompts for _ in range(GENERATIONS)]
    gens = policy.generate(ids, SamplingParams(max_new_tokens=COMPLETION, temperature=1.0))
    trajs = []
    for p, g in zip(ids, gens, strict=True):
        t = Trajectory(task_id="t", prompt="")
        t.extend(p, trained=False)
        r = length_reward(g.text)
        turn = TurnRecord(g.text, "", r, {"outcome": r}, "ok", len(p), len(p) + len(g.token_ids), {})
        t.extend(g.token_ids, trained=True, logprobs=g.logprobs)
        t.turns.append(turn)
        trajs.append(t)
    batch = build_batch(trajs, Grouping([i // GENERATIONS for i in range(len(trajs))]), cfg)
    learner_step(policy.model, opt, batch, cfg)
    return batch.num_tokens


def bench_prm(tok: Any) -> list[float]:
    policy = HFPolicy(tiny_model(len(tok), seed=0), tok, seed=0)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=LR)
    cfg = LossConfig(micro_batch_size=PROMPTS * GENERATIONS, max_grad_norm=1.0)
    rates = []
    for s in range(WARMUP + STEPS):
        qs = QUESTIONS[(s * PROMPTS) % len(QUESTIONS) :][:PROMPTS]
        prompts = [list(tok.encode(q, add_special_tokens=False)) for q in qs]
        t0 = time.perf_counter()
        n = prm_step(policy, opt, prompts, cfg)
        if s >= WARMUP:
            rates.append(n / (time.perf_counter() - t0))
    return rates


def bench_trl(tok: Any) -> list[float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokens: list[int] = [0]

    def reward(completions: list[str], completion_ids: list[list[int]], prompts: list[str], **_: Any) -> list[Any]:
        tokens[0] += sum(len(c) for c in completion_ids)
        tokens[0] += sum(len(tok.encode(p, add_special_tokens=False)) for p in prompts)
        return [length_reward(c) for c in completions]

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.rates: list[float] = []
            self.t0 = 0.0

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.t0, tokens[0] = time.perf_counter(), 0

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            self.rates.append(tokens[0] / (time.perf_counter() - self.t0))

    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=PROMPTS * GENERATIONS,
            num_generations=GENERATIONS,
            max_completion_length=COMPLETION,
            max_steps=WARMUP + STEPS,
            learning_rate=LR,
            beta=0.0,
            temperature=1.0,
            loss_type="grpo",
            max_grad_norm=1.0,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            bf16=False,
            seed=0,
            dataloader_num_workers=0,
            gradient_checkpointing=False,  # as prm-gym's learner (TRL's default is on)
        )
        trainer = GRPOTrainer(
            model=tiny_model(len(tok), seed=0),
            reward_funcs=reward,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": QUESTIONS}),
            processing_class=tok,
            callbacks=[clock],
        )
        trainer.train()
    return clock.rates[WARMUP:]


def main() -> None:
    torch.set_num_threads(1)
    tok = tiny_tokenizer()
    runs: dict[str, list[float]] = {"TRL GRPOTrainer": [], "prm-gym trainer": []}
    for r in range(ROUNDS):  # alternated: TRL first in even rounds, prm-gym first in odd ones
        order = [("TRL GRPOTrainer", bench_trl), ("prm-gym trainer", bench_prm)]
        for name, bench in order if r % 2 == 0 else order[::-1]:
            runs[name].append(statistics.median(bench(tok)))
    trl_rates, prm_rates = runs["TRL GRPOTrainer"], runs["prm-gym trainer"]
    print(f"shapes: {PROMPTS} prompts x {GENERATIONS} generations, <= {COMPLETION} new tokens, hf:tiny, CPU 1 thread")
    print(
        f"gradient checkpointing off on both sides; {ROUNDS} alternated rounds of {STEPS} steps after {WARMUP} warm-up"
    )
    for name, xs in runs.items():
        rounds = ", ".join(f"{x:.0f}" for x in xs)
        print(f"{name:<16} tokens/s: median of rounds {statistics.median(xs):.0f} (rounds: {rounds})")
    print(
        f"prm-gym / TRL tokens/s ratio: {statistics.median(prm_rates) / statistics.median(trl_rates):.2f} (target >= 1)"
    )
    from result_line import emit, spread  # the machine-readable row for run_all.py

    emit(
        "trainer",
        "GRPO training tokens/s",
        statistics.median(prm_rates),
        statistics.median(trl_rates),
        f"TRL GRPOTrainer (same model, shapes; gradient checkpointing off both sides; {ROUNDS} alternated rounds)",
        "tokens/s",
        "higher",
        f"round medians: ours {spread(prm_rates)}, TRL {spread(trl_rates)}",
    )


if __name__ == "__main__":
    main()
