"""The settings every arm of every comparison shares (``compare`` on math, ``compare --task search``)."""

from __future__ import annotations

import argparse
from typing import Any

from prm_gym.training.config import EvalConfig, LossConfig, SamplingConfig, TrainConfig, TreeConfig


def study_config(
    args: argparse.Namespace, seed: int, tree: TreeConfig, max_context_tokens: int, **run: Any
) -> TrainConfig:
    """A run of the study: ``run`` names the env, its kwargs and the policy (and anything else the
    task sets); the group, step, learning rate, precision, sampling, loss and eval come from ``args``
    and are the same for every arm; every arm trains and evaluates on ``--device``."""
    return TrainConfig(
        tools_prompt="compact",
        group_size=tree.leaves_per_task,
        tasks_per_step=args.tasks_per_step,
        steps=args.steps,
        lr=args.lr,
        seed=seed,
        device=args.device,
        precision="bf16",
        checkpoint_every=0,
        tensorboard=False,
        progress=False,
        tree=tree,
        sampling=SamplingConfig(
            max_new_tokens=args.max_new_tokens, temperature=1.0, max_context_tokens=max_context_tokens
        ),
        loss=LossConfig(micro_batch_size=args.micro_batch),
        eval=EvalConfig(num_tasks=args.eval_tasks, samples=args.eval_samples, temperature=1.0, every=args.eval_every),
        **run,
    )
