"""Training configuration: nested frozen dataclasses, parsed into ``train-agent`` by tyro.

This module imports no torch, so ``train-agent --help`` and config tests stay fast. Every
field has a docstring (tyro shows it in ``--help``); ``__post_init__`` validates values and
raises :class:`prm_gym.core.errors.ConfigError` naming the field and the fix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from prm_gym.core.errors import ConfigError
from prm_gym.training.mixture import EnvShare, kwargs_per_env, parse_env_spec


def _check(ok: bool, name: str, value: Any, fix: str) -> None:
    if not ok:
        raise ConfigError(f"{name}={value!r} is invalid: {fix}.")


def parse_json_kwargs(name: str, text: str) -> dict[str, Any]:
    """The JSON object in ``text`` (empty text: ``{}``); a ConfigError naming ``name`` otherwise."""
    _check(isinstance(text, str), name, text, "give the keyword arguments as a JSON string")
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} must be a JSON object such as '{{\"levels\": [1]}}': {exc}.") from exc
    _check(isinstance(value, dict), name, text, "give a JSON object such as '{\"levels\": [1]}'")
    return dict(value)


@dataclass(frozen=True)
class SamplingConfig:
    """How the policy samples turns during training."""

    max_new_tokens: int = 48
    """Most tokens sampled for one assistant turn."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts (0 = greedy)."""
    max_context_tokens: int = 2048
    """An episode whose token ids would exceed this is truncated."""

    def __post_init__(self) -> None:
        _check(self.max_new_tokens >= 1, "sampling.max_new_tokens", self.max_new_tokens, "use a value >= 1")
        _check(self.temperature >= 0, "sampling.temperature", self.temperature, "use a value >= 0")
        _check(
            self.max_context_tokens > self.max_new_tokens,
            "sampling.max_context_tokens",
            self.max_context_tokens,
            "make it larger than sampling.max_new_tokens",
        )


@dataclass(frozen=True)
class LossConfig:
    """Advantages and the clipped policy-gradient loss (DAPO-style options slot in here)."""

    scale_by_std: bool = True
    """Divide group-relative advantages by the group's reward std (Dr.GRPO: False)."""
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """How per-token losses become one number: mean over all tokens of the batch (token-level, DAPO
    section 3.3, Yu et al. 2025: long responses are not down-weighted), mean over sequences of each
    sequence's token mean (GRPO's sequence-level), or mean over sequences of token sums (Dr.GRPO)."""
    clip_low: float = 0.2
    """Lower PPO clip: the ratio is clipped at 1 - clip_low."""
    clip_high: float = 0.2
    """Upper PPO clip: the ratio is clipped at 1 + clip_high. DAPO's clip-higher (Yu et al. 2025,
    section 3.1) raises it to 0.28 so low-probability tokens can grow (against entropy collapse);
    it only acts when the ratio leaves 1 (updates_per_batch > 1 or stale rollouts)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL estimate to a frozen copy of the initial policy (0: no reference)."""
    outcome_terms: tuple[str, ...] = ("outcome",)
    """Reward terms that form the episode outcome; every other term is a per-turn process reward."""
    process_coef: float = 1.0
    """Weight of the normalised per-turn process reward-to-go added to the outcome advantage."""
    gamma: float = 1.0
    """Discount of the process reward-to-go across turns."""
    is_cap: float = 2.0
    """Truncated importance-sampling cap for the behaviour/current probability ratio."""
    updates_per_batch: int = 1
    """Optimiser steps per collected batch (>1 computes the proximal log-probs once first)."""
    micro_batch_size: int = 8
    """Sequences per forward/backward pass (gradient accumulation over the batch)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip (0: none)."""
    std_scope: Literal["group", "batch"] = "group"
    """Std that scales outcome advantages: each group's, or the whole batch's after group-mean
    centring ("Lite PPO", Liu et al. 2025, *Tricks or Traps? A Deep Dive into RL for LLM Reasoning*)."""
    overlong_buffer: int = 0
    """DAPO soft overlong punishment (Yu et al. 2025): a turn whose length passes
    max_new_tokens - overlong_buffer loses up to overlong_penalty, linearly (0: off)."""
    overlong_penalty: float = 1.0
    """Largest overlong penalty per turn, reached at max_new_tokens; added to the outcome return."""
    prime: bool = False
    """PRIME (Cui et al. 2025): an implicit PRM, initialised from the policy and trained online on the
    outcome labels, gives token rewards; advantages are PRIME's leave-one-out estimate (eq. 5)."""
    prime_beta: float = 0.05
    """PRIME's implicit-reward coefficient beta."""
    prime_lr: float = 1e-6
    """Learning rate of the PRM's own AdamW optimiser."""

    def __post_init__(self) -> None:
        _check(0 <= self.clip_low < 1, "loss.clip_low", self.clip_low, "use a value in [0, 1)")
        _check(self.clip_high >= 0, "loss.clip_high", self.clip_high, "use a value >= 0")
        _check(self.kl_coef >= 0, "loss.kl_coef", self.kl_coef, "use a value >= 0")
        _check(0 < self.gamma <= 1, "loss.gamma", self.gamma, "use a discount in (0, 1]")
        _check(self.is_cap >= 1, "loss.is_cap", self.is_cap, "use a cap >= 1")
        _check(self.updates_per_batch >= 1, "loss.updates_per_batch", self.updates_per_batch, "use >= 1")
        _check(self.micro_batch_size >= 1, "loss.micro_batch_size", self.micro_batch_size, "use >= 1")
        _check(self.max_grad_norm >= 0, "loss.max_grad_norm", self.max_grad_norm, "use >= 0 (0 disables)")
        _check(self.overlong_buffer >= 0, "loss.overlong_buffer", self.overlong_buffer, "use >= 0 (0 disables)")
        _check(self.overlong_penalty >= 0, "loss.overlong_penalty", self.overlong_penalty, "use >= 0")
        _check(self.prime_beta > 0, "loss.prime_beta", self.prime_beta, "use a value > 0 such as 0.05")
        _check(self.prime_lr > 0, "loss.prime_lr", self.prime_lr, "use a learning rate > 0 such as 1e-6")


@dataclass(frozen=True)
class RecipeConfig:
    """Rollout-side recipes from the agentic-RL literature (all off by default; every backend)."""

    dynamic_sampling: Literal["off", "drop", "resample"] = "off"
    """DAPO dynamic sampling (Yu et al. 2025): drop groups whose trajectories all earned the same
    rewards (zero advantage), or resample new tasks until the step has tasks_per_step useful groups."""
    max_resample_rounds: int = 3
    """With dynamic_sampling=resample: most extra collection rounds per step."""
    roc_oversample: float = 1.0
    """GRPO-RoC (rStar2-Agent, Shang et al. 2025): sample group_size * this per task, keep the correct
    trajectories with the fewest tool/format errors and the failed ones uniformly (1: off)."""
    success_threshold: float = 1.0
    """Outcome return that counts as correct (RoC, difficulty filter, curriculum)."""
    difficulty_filter: bool = False
    """Online difficulty filtering (Bae et al. 2025, *Online Difficulty Filtering for Reasoning
    Oriented RL*): skip tasks whose running pass rate is outside [difficulty_low, difficulty_high]."""
    difficulty_low: float = 0.0
    """Tasks seen passing at most this often are skipped (too hard)."""
    difficulty_high: float = 1.0
    """Tasks seen passing at least this often are skipped (too easy)."""
    curriculum: bool = False
    """Adaptive curriculum over task.meta['level'] (per env of a mixture, task.meta['env']): start
    at the lowest level, unlock the next when the frontier's pass rate reaches curriculum_promote."""
    curriculum_promote: float = 0.5
    """Running pass rate of the highest unlocked level that unlocks the next one."""
    curriculum_target: float = 0.5
    """Unlocked levels are sampled with weight exp(-|pass_rate - target| / 0.25)."""

    def __post_init__(self) -> None:
        _check(self.max_resample_rounds >= 1, "recipes.max_resample_rounds", self.max_resample_rounds, "use >= 1")
        _check(self.roc_oversample >= 1, "recipes.roc_oversample", self.roc_oversample, "use >= 1 (1 disables)")
        _check(
            0 <= self.difficulty_low < self.difficulty_high <= 1,
            "recipes.difficulty_low",
            (self.difficulty_low, self.difficulty_high),
            "use 0 <= difficulty_low < difficulty_high <= 1",
        )
        _check(0 < self.curriculum_promote <= 1, "recipes.curriculum_promote", self.curriculum_promote, "use (0, 1]")
        _check(0 <= self.curriculum_target <= 1, "recipes.curriculum_target", self.curriculum_target, "use [0, 1]")


@dataclass(frozen=True)
class TreeConfig:
    """Tree-GRPO: per task, ``num_trees`` trees whose nodes are whole agent turns."""

    num_trees: int = 2
    """Trees per task (M); each starts from one full episode."""
    expand_nodes: int = 2
    """Turn boundaries expanded per round and tree (N)."""
    expand_rounds: int = 1
    """Expansion rounds (L); each adds N leaves per tree, so a tree has 1 + N*L leaves."""

    def __post_init__(self) -> None:
        _check(self.num_trees >= 1, "tree.num_trees", self.num_trees, "use >= 1")
        _check(self.expand_nodes >= 1, "tree.expand_nodes", self.expand_nodes, "use >= 1")
        _check(self.expand_rounds >= 1, "tree.expand_rounds", self.expand_rounds, "use >= 1")

    @property
    def leaves_per_task(self) -> int:
        return self.num_trees * (1 + self.expand_nodes * self.expand_rounds)


@dataclass(frozen=True)
class AsyncConfig:
    """Asynchronous rollouts: the next steps' episodes are played while the learner trains."""

    enabled: bool = False
    """Play up to max_staleness steps ahead of the learner (any backend; workers take new weights
    between groups)."""
    max_staleness: int = 1
    """Most policy versions a trajectory may lag the learner (0: behaves synchronously)."""
    stale: Literal["drop", "correct"] = "drop"
    """Trajectories older than max_staleness: drop them, or keep them with the IS correction."""

    def __post_init__(self) -> None:
        _check(self.max_staleness >= 0, "async.max_staleness", self.max_staleness, "use >= 0")


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation: reward, success rate, pass@k and maj@k."""

    env_kwargs: str = '{"split": "test"}'
    """JSON keyword arguments for the held-out env (merged over --env-kwargs)."""
    tasks: str = ""
    """Held-out tasks, in the forms --tasks takes (empty: --tasks, or the env's generator, read with
    --eval.env-kwargs' split, so a dataset folder with a test split gives it)."""
    num_tasks: int = 32
    """Held-out tasks evaluated (the first ones of the held-out task set)."""
    samples: int = 4
    """Samples per task (n of pass@k); without --eval.k, pass@1 and pass@n are reported."""
    temperature: float = 1.0
    """Sampling temperature for evaluation (0 = greedy, then use samples=1)."""
    success_threshold: float = 1.0
    """An episode succeeds when its outcome return reaches this."""
    every: int = 0
    """Evaluate every this many training steps (0: only at the start and the end)."""
    k: tuple[int, ...] = ()
    """The k of pass@k and maj@k, e.g. --eval.k 1 4 8 (each at most samples; empty: 1 and samples).
    Reported overall, per difficulty level and per env (docs/training.md, "Evaluation")."""

    def __post_init__(self) -> None:
        parse_json_kwargs("eval.env_kwargs", self.env_kwargs)
        _check(self.num_tasks >= 1, "eval.num_tasks", self.num_tasks, "use >= 1")
        _check(self.samples >= 1, "eval.samples", self.samples, "use >= 1")
        _check(
            all(1 <= k <= self.samples for k in self.k),
            "eval.k",
            self.k,
            f"each k must be in [1, eval.samples={self.samples}]; raise --eval.samples to at least "
            f"{max(self.k, default=1)} (pass@k and maj@k need k samples per task)",
        )
        _check(self.temperature >= 0, "eval.temperature", self.temperature, "use >= 0")
        _check(self.every >= 0, "eval.every", self.every, "use >= 0")


@dataclass(frozen=True)
class SQLConfig:
    """prm/SQL-v0's database engine, passed to the env as its backend, pg_dsn and pg_bin_dir arguments."""

    backend: Literal["sqlite", "postgres"] = "sqlite"
    """SQLite files, or PostgreSQL: a throwaway server the env starts itself (initdb and pg_ctl
    from Debian's postgresql package) or the server of --sql.pg-dsn."""
    pg_dsn: str = ""
    """A running PostgreSQL server (a libpq connection string whose user may create databases and
    roles) to load the task databases into, instead of a throwaway server."""
    pg_bin_dir: str = ""
    """The folder of initdb and pg_ctl for the throwaway server (empty: PATH, then the newest
    /usr/lib/postgresql/*/bin)."""

    def __post_init__(self) -> None:
        _check(
            self.backend == "postgres" or not (self.pg_dsn or self.pg_bin_dir),
            "sql.backend",
            self.backend,
            "--sql.pg-dsn and --sql.pg-bin-dir need --sql.backend postgres",
        )

    def env_kwargs(self) -> dict[str, Any]:
        """The env keyword arguments these settings stand for (none at the defaults)."""
        if self.backend == "sqlite":
            return {}
        kw: dict[str, Any] = {"backend": self.backend}
        if self.pg_dsn:
            kw["pg_dsn"] = self.pg_dsn
        if self.pg_bin_dir:
            kw["pg_bin_dir"] = self.pg_bin_dir
        return kw


@dataclass(frozen=True)
class LoraConfig:
    """LoRA (Hu et al. 2021, through peft): train low-rank adapters instead of the whole model."""

    rank: int = 0
    """Adapter rank r, e.g. --lora.rank 16 (0: train the whole model). Needs peft: pip install 'prm-gym[lora]'."""
    alpha: float = 32.0
    """The adapters' update is scaled by alpha / rank."""
    dropout: float = 0.0
    """Dropout on the adapters' input (0 keeps the learner's log-probs those of the sampler)."""
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Linear layers that get adapters (Llama-style attention projections by default)."""
    publish: Literal["merged", "adapter"] = "merged"
    """How --policy vllm:<url> servers get new weights: the adapters merged into a full copy they
    reload, or the adapter alone through vLLM's runtime LoRA loading (start the servers with
    --enable-lora --max-lora-rank >= rank and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)."""

    def __post_init__(self) -> None:
        _check(self.rank >= 0, "lora.rank", self.rank, "use a rank >= 1 such as 16 (0 trains the whole model)")
        _check(self.alpha > 0, "lora.alpha", self.alpha, "use a value > 0 such as 32")
        _check(0 <= self.dropout < 1, "lora.dropout", self.dropout, "use a value in [0, 1)")
        _check(
            self.rank == 0 or len(self.target_modules) > 0,
            "lora.target_modules",
            self.target_modules,
            "name the linear layers to adapt, e.g. --lora.target-modules q_proj v_proj",
        )


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
    """Policy id: hf:tiny, hf:smollm2-135m, hf:<directory>, vllm:<url>[,<url>...] (vLLM servers), or
    vllm-engine:<directory> (vLLM in this process, sampling from the HF weights the learner trains)."""
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
    algo: Literal["grpo", "tree-grpo"] = "grpo"
    """Chain GRPO groups, or Tree-GRPO trees forked at turn boundaries."""
    mode: Literal["train", "eval"] = "train"
    """Train, or only evaluate the latest checkpoint in output_dir (or the initial policy)."""
    group_size: int = 4
    """Episodes per task in a GRPO group."""
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
    progress: bool = True
    """Show a live progress bar with reward, staleness and tokens/s."""
    max_excluded_fraction: float = 0.5
    """Stop the run with an error when more than this fraction of its turns were excluded as
    infra_error (a judge, sandbox or retriever failing), instead of training on what is left."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    recipes: RecipeConfig = field(default_factory=RecipeConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    asynchronous: AsyncConfig = field(default_factory=AsyncConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sql: SQLConfig = field(default_factory=SQLConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        self._check_envs()
        _check(
            self.lora.publish == "merged" or self.policy.startswith("vllm:") or bool(self.vllm_weights),
            "lora.publish",
            self.lora.publish,
            "adapter publishing is for --policy vllm:<url> servers; other policies get merged weights",
        )
        env_kw = parse_json_kwargs("env_kwargs", self.env_kwargs)
        _check(
            not self.sql.env_kwargs() or any(e.startswith("prm/SQL-") for e in self.env_ids),
            "sql.backend",
            self.sql.backend,
            f"--sql.* settings apply to prm/SQL-v0, not {', '.join(self.env_ids)}",
        )
        both = sorted(set(self.sql.env_kwargs()) & set(env_kw))
        _check(not both, "env_kwargs", self.env_kwargs, f"{both} also set by --sql.*; give them in one place")
        _check(
            not (self.tasks or self.eval.tasks) or len(self.env_ids) == 1,
            "tasks",
            self.tasks or self.eval.tasks,
            "--tasks and --eval.tasks name one env's tasks; in a mixture give each env its own in "
            """--env-kwargs '{"prm/Math-v0": {"tasks": ...}}'""",
        )
        _check(
            not self.env_url or re.fullmatch(r"https?://[^\s/]+(/\S*)?", self.env_url) is not None,
            "env_url",
            self.env_url,
            "give the env server's base URL, e.g. http://localhost:8000 (start one with prm-serve)",
        )
        _check(
            self.policy.startswith(("hf:", "vllm:", "vllm-engine:")),
            "policy",
            self.policy,
            "use hf:tiny, hf:<dir>, vllm:<url> or vllm-engine:<dir>",
        )
        _check(
            not self.policy.startswith("vllm:") or self.vllm_weights.startswith("hf:"),
            "vllm_weights",
            self.vllm_weights,
            "with --policy vllm:<url> give the served weights as --vllm-weights hf:<dir>",
        )
        _check(
            re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device) is not None,
            "device",
            self.device,
            "use auto, cpu, cuda or cuda:N",
        )
        _check(self.num_workers >= 1, "num_workers", self.num_workers, "use >= 1")
        _check(self.group_size >= 2, "group_size", self.group_size, "use >= 2 (a group needs a baseline)")
        _check(self.tasks_per_step >= 1, "tasks_per_step", self.tasks_per_step, "use >= 1")
        _check(self.steps >= 0, "steps", self.steps, "use >= 0")
        _check(self.lr > 0, "lr", self.lr, "use a positive learning rate such as 1e-5")
        _check(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, "use >= 0")
        _check(
            0 <= self.max_excluded_fraction <= 1,
            "max_excluded_fraction",
            self.max_excluded_fraction,
            "use a fraction in [0, 1]",
        )
        _check(
            not (self.algo == "tree-grpo" and self.recipes.roc_oversample > 1),
            "recipes.roc_oversample",
            self.recipes.roc_oversample,
            "Resample-on-Correct down-samples a flat oversampled group; use it with --algo grpo",
        )

    # ---- the envs of the run (one, or a weighted mixture: training/mixture.py) ----

    def _check_envs(self) -> None:
        shares = parse_env_spec(self.env)
        self.env_kwargs_for(shares[0].env_id)  # both JSON objects parse and name only the run's envs
        self.eval_env_kwargs_for(shares[0].env_id)
        _check(
            len(shares) == 1 or not self.env_url,
            "env_url",
            self.env_url,
            "an env server serves one env; train a mixture with local envs (drop --env-url)",
        )

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
        """Keyword arguments of ``env_id`` for training (``--env-kwargs``, ``--sql.*``, then
        ``--judge`` and ``--tasks``)."""
        kw = kwargs_per_env(parse_json_kwargs("env_kwargs", self.env_kwargs), self.env_ids, "env_kwargs")[env_id]
        if env_id.startswith("prm/SQL-"):
            kw.update(self.sql.env_kwargs())
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
