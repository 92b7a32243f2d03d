"""Training configuration: :class:`TrainConfig`, parsed into ``train-agent`` by tyro.

The run-level settings live here; each ``--<section>.*`` flag group is its own dataclass in
:mod:`prm_gym.training.config_sections`, re-exported from this module so every config class
imports from one place. This module imports no torch, so ``train-agent --help`` and config tests
stay fast. Every field has a docstring (tyro shows it in ``--help``); ``__post_init__`` validates
values and raises :class:`prm_gym.core.errors.ConfigError` naming the field and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from prm_gym.core.errors import ConfigError
from prm_gym.core.policy_spec import PolicySpec
from prm_gym.rewards.combine import CombineConfig
from prm_gym.training.config_sections import (
    AsyncConfig,
    EvalConfig,
    LoraConfig,
    LossConfig,
    RecipeConfig,
    SamplingConfig,
    TreeConfig,
    check,
    parse_json_kwargs,
    sized_eval,
)
from prm_gym.training.mixture import EnvShare, kwargs_per_env, parse_env_spec

DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"
"""What ``--device`` accepts (every study's flag too): ``auto`` (a GPU when torch sees one), ``cpu``,
``cuda`` or ``cuda:N``."""

__all__ = [
    "AsyncConfig",
    "CombineConfig",
    "EvalConfig",
    "LoraConfig",
    "LossConfig",
    "RecipeConfig",
    "SamplingConfig",
    "TrainConfig",
    "TreeConfig",
    "parse_json_kwargs",
]


@dataclass(frozen=True)
class TrainConfig:
    """Train any registered env with any policy, judge and algorithm."""

    env: str | tuple[str, ...] = "prm/Math-v0"
    """Registered env id, or a weighted mixture: --env prm/Math-v0:0.5 --env prm/SQL-v0:0.3 --env
    prm/Search-v0:0.2 (each task of a step comes from an env drawn by weight; no weights: equal
    shares; docs/training.md, "Mixed-env runs")."""
    env_kwargs: str = ""
    """JSON keyword arguments for gym.make, e.g. '{"levels": [1]}'; in a mixture a key naming one
    of its envs holds that env's own, e.g. '{"max_turns": 4, "prm/Math-v0": {"levels": [1]}}'."""
    tasks: str = ""
    """The env's tasks instead of its generator: a task file (jsonl, json, parquet, arrow), a dataset
    folder, or dataset:<name>:<path> with name gsm8k, math, hotpotqa, nq, search-r1, spider, bird, mbpp
    or humaneval (docs/envs/datasets.md). Passed as the env's tasks= (over --env-kwargs)."""
    env_url: str = ""
    """A prm-serve env server (e.g. http://host:8000): rollout workers and evaluation play RemoteEnv
    sessions on it instead of gym.make. --env must name the env it serves; --env-kwargs and
    --eval.env-kwargs are sent with each session (only keys its --allow-kwargs names)."""
    imports: tuple[str, ...] = ()
    """Modules to import first, so their envs and judges resolve (e.g. weather_agent)."""
    policy: str = "hf:tiny"
    """Policy id: hf:tiny, hf:smollm2-135m, hf:<directory> (a model folder or a train-agent run directory),
    vllm:<url>[,<url>...] (vLLM servers), vllm-engine:<directory> (vLLM in this process, sampling from the HF
    weights the learner trains), or, with --mode eval only, openai:<model>@<base_url> (any OpenAI-compatible chat
    server; key from $OPENAI_API_KEY)."""
    vllm_weights: str = ""
    """With --policy vllm:<url>: the hf: id of the weights the servers serve (the learner trains
    them, writes them back and the servers reload them after every step)."""
    device: str = "auto"
    """Where the learner (and an hf: policy) runs: auto (a GPU when torch sees one), cpu, cuda, cuda:N."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """bf16: an hf: policy samples from a bfloat16 copy of the weights and the learner's forward and
    backward run under bfloat16 autocast, while the weights and AdamW state stay fp32 (about 3x
    faster on CPUs with AVX512-BF16 or AMX, and on GPUs; the truncated importance weights correct
    for the sampler's rounding)."""
    sharding: Literal["ddp", "fsdp"] = "ddp"
    """Under torchrun: replicate the learner (DDP) or shard its weights, gradients and AdamW
    moments over the ranks (FSDP; see docs/scale-out.md). Ignored in one process."""
    backend: Literal["local", "ray"] = "local"
    """Where rollouts run: in this process, or on Ray rollout workers (see docs/scale-out.md)."""
    num_workers: int = 1
    """Rollout workers, each with its own envs, judges and sandboxes: threads in this process
    (--backend local; groups waiting on tools overlap), or Ray actors with their own policy copy."""
    ray_address: str = ""
    """An existing Ray cluster to join (e.g. auto or ray://head:10001); empty: start a local one."""
    judge: str = ""
    """Judge expression passed to the env (empty: the env's default)."""
    tool_format: Literal["auto", "hermes", "llama3", "mistral", "qwen", "openai"] = "auto"
    """How the policy writes tool calls (docs/tool_formats.md): auto reads it from the tokenizer's chat
    template (hermes when it names none). The prompt teaches this format and the envs parse it."""
    tools_prompt: Literal["auto", "full", "compact", "native"] = "auto"
    """System prompt tool block: auto (native where the tokenizer's template renders tools= in the tool
    format, else full), full JSON schemas, compact signatures (tiny byte-level models), or native."""
    system_prompt: str = ""
    """The system message before the tool block (empty: the default one). Put a worked example here to
    show the model a complete tool call (make learn's few-shot prompt does)."""
    algo: Literal["grpo", "tree-grpo"] = "grpo"
    """Chain GRPO groups, or Tree-GRPO trees forked at turn boundaries."""
    mode: Literal["train", "eval"] = "train"
    """Train, or only evaluate the latest checkpoint in output_dir (or the initial policy)."""
    group_size: int = 4
    """Episodes per task in a GRPO group; with --algo tree-grpo, the leaves per task, which must equal
    tree.num_trees * (1 + tree.expand_nodes * tree.expand_rounds) (the defaults give 4)."""
    tasks_per_step: int = 2
    """Tasks (groups or tree sets) per optimiser step."""
    steps: int = 20
    """Optimiser steps (policy versions) to train."""
    lr: float = 1e-4
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    output_dir: str = "runs/train"
    """Where metrics.jsonl, plots, checkpoints and eval results go."""
    seed: int = 0
    """Seed of task choice, episode seeds and the sampler."""
    checkpoint_every: int = 10
    """Save an atomic checkpoint every this many steps (0: only at the end)."""
    resume: bool = False
    """Continue from output_dir/checkpoint.pt exactly where it stopped."""
    init_checkpoint: str = ""
    """Start from these weights (a checkpoint.pt or a state-dict file), e.g. an SFT warm start."""
    tensorboard: bool = True
    """Also log to TensorBoard when it is installed."""
    report_to: tuple[Literal["trackio", "wandb", "mlflow"], ...] = ()
    """Also log every metrics row to these trackers, e.g. --report-to wandb (each needs its extra:
    pip install 'prm-gym[wandb]'; settings from its environment variables, docs/training.md)."""
    report_project: str = "prm-gym"
    """The trackers' project (wandb, trackio) or experiment (MLflow); the run is named after --output-dir."""
    progress: bool = True
    """Show a live progress bar with reward, staleness and tokens/s."""
    max_excluded_fraction: float = 0.5
    """Stop the run with an error when more than this fraction of its turns were excluded as
    infra_error (a judge, sandbox or retriever failing), instead of training on what is left."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    shaping: CombineConfig = field(default_factory=CombineConfig)
    """How process and outcome rewards are mixed per group (PURE's credit=min, G-RA's gate, ReNorm,
    normalisation, clipping; docs/judges.md); replaces the options after ';' in --judge."""
    recipes: RecipeConfig = field(default_factory=RecipeConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    asynchronous: AsyncConfig = field(default_factory=AsyncConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval", sized_eval(self.eval, self.steps, self.mode))  # 0: sized to the run
        self._check_envs()
        spec = _spec_or_none(self.policy)  # checked below, after the checks that name other fields
        kind = spec.kind if spec is not None else None
        check(
            self.lora.publish == "merged" or kind == "vllm" or bool(self.vllm_weights),
            "lora.publish",
            self.lora.publish,
            "adapter publishing is for --policy vllm:<url> servers; other policies get merged weights",
        )
        parse_json_kwargs("env_kwargs", self.env_kwargs)  # malformed JSON fails here, naming the flag
        check(
            not (self.tasks or self.eval.tasks) or len(self.env_ids) == 1,
            "tasks",
            self.tasks or self.eval.tasks,
            "--tasks and --eval.tasks name one env's tasks; in a mixture give each env its own in "
            """--env-kwargs '{"prm/Math-v0": {"tasks": ...}}'""",
        )
        check(
            not self.env_url or re.fullmatch(r"https?://[^\s/]+(/\S*)?", self.env_url) is not None,
            "env_url",
            self.env_url,
            "give the env server's base URL, e.g. http://localhost:8000 (start one with prm-serve)",
        )
        check(
            spec is not None,
            "policy",
            self.policy,
            "use hf:tiny, hf:<dir>, vllm:<url>, vllm-engine:<dir> or (with --mode eval) openai:<model>@<base_url>",
        )
        check(
            self.mode == "eval" or spec is None or spec.trainable,
            "policy",
            self.policy,
            "an openai: chat-server policy can be evaluated (--mode eval) but not trained: training needs the "
            "token ids the policy sampled and their log-probs, which a chat API does not return; train hf:<model> "
            "or vllm:<url> with --vllm-weights",
        )
        check(
            kind != "vllm" or getattr(_spec_or_none(self.vllm_weights), "kind", None) == "hf",
            "vllm_weights",
            self.vllm_weights,
            "with --policy vllm:<url> give the served weights as --vllm-weights hf:<dir>",
        )
        check(
            re.fullmatch(DEVICE_PATTERN, self.device) is not None,
            "device",
            self.device,
            "use auto, cpu, cuda or cuda:N",
        )
        check(self.num_workers >= 1, "num_workers", self.num_workers, "use >= 1")
        check(self.group_size >= 2, "group_size", self.group_size, "use >= 2 (a group needs a baseline)")
        check(self.tasks_per_step >= 1, "tasks_per_step", self.tasks_per_step, "use >= 1")
        check(self.steps >= 0, "steps", self.steps, "use >= 0")
        check(self.lr > 0, "lr", self.lr, "use a positive learning rate such as 1e-5")
        check(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, "use >= 0")
        check(
            0 <= self.max_excluded_fraction <= 1,
            "max_excluded_fraction",
            self.max_excluded_fraction,
            "use a fraction in [0, 1]",
        )
        check(
            not (self.algo == "tree-grpo" and self.recipes.roc_oversample > 1),
            "recipes.roc_oversample",
            self.recipes.roc_oversample,
            "Resample-on-Correct down-samples a flat oversampled group; use it with --algo grpo",
        )
        check(
            self.algo != "tree-grpo" or self.group_size == self.tree.leaves_per_task,
            "group_size",
            self.group_size,
            f"--algo tree-grpo plays tree.num_trees * (1 + tree.expand_nodes * tree.expand_rounds) = "
            f"{self.tree.leaves_per_task} leaves per task; set --group-size {self.tree.leaves_per_task} "
            "or change the tree",
        )

    # ---- the envs of the run (one, or a weighted mixture: training/mixture.py) ----

    def _check_envs(self) -> None:
        shares = parse_env_spec(self.env)
        self.env_kwargs_for(shares[0].env_id)  # both JSON objects parse and name only the run's envs
        self.eval_env_kwargs_for(shares[0].env_id)
        check(
            len(shares) == 1 or not self.env_url,
            "env_url",
            self.env_url,
            "an env server serves one env; train a mixture with local envs (drop --env-url)",
        )

    @property
    def policy_spec(self) -> PolicySpec:
        """``--policy`` parsed (checked valid when the config was made)."""
        return PolicySpec.parse(self.policy)

    @property
    def sample_dtype(self) -> str | None:
        """The torch dtype an hf: sampler's copy of the weights takes (None: the weights themselves)."""
        return "bfloat16" if self.precision == "bf16" else None

    @property
    def env_shares(self) -> tuple[EnvShare, ...]:
        """The run's envs with their normalised weights (one env: weight 1)."""
        return parse_env_spec(self.env)

    @property
    def env_ids(self) -> tuple[str, ...]:
        """The run's env ids, in the order given."""
        return tuple(s.env_id for s in self.env_shares)

    def env_kwargs_for(self, env_id: str) -> dict[str, Any]:
        """Keyword arguments of ``env_id`` for training (``--env-kwargs``, then ``--judge`` and
        ``--tasks``)."""
        kw = kwargs_per_env(parse_json_kwargs("env_kwargs", self.env_kwargs), self.env_ids, "env_kwargs")[env_id]
        if self.judge:
            kw["judge"] = self.judge
        if self.tasks:
            kw["tasks"] = self.tasks
        return kw

    def eval_env_kwargs_for(self, env_id: str) -> dict[str, Any]:
        """Keyword arguments of ``env_id`` for held-out evaluation (``--eval.env-kwargs`` over the training ones)."""
        ev = kwargs_per_env(parse_json_kwargs("eval.env_kwargs", self.eval.env_kwargs), self.env_ids, "eval.env_kwargs")
        kw = {**self.env_kwargs_for(env_id), **ev[env_id]}
        if self.eval.tasks:
            kw["tasks"] = self.eval.tasks
        return kw

    @property
    def env_kwargs_dict(self) -> dict[str, Any]:
        """Training keyword arguments of the first env (the only one outside a mixture)."""
        return self.env_kwargs_for(self.env_ids[0])

    @property
    def eval_env_kwargs(self) -> dict[str, Any]:
        """Evaluation keyword arguments of the first env (the only one outside a mixture)."""
        return self.eval_env_kwargs_for(self.env_ids[0])


def _spec_or_none(policy_id: str) -> PolicySpec | None:
    try:
        return PolicySpec.parse(policy_id)
    except ConfigError:
        return None
