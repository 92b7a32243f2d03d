"""The sections of the training configuration: one frozen dataclass per ``--<section>.*`` flag group.

Sampling, loss, rollout recipes, Tree-GRPO, asynchronous rollouts, evaluation, the SQL engine and
LoRA each get a small config here; :class:`prm_gym.training.config.TrainConfig` nests them (import
them from there). Like that module this one imports no torch. Every field has a docstring (tyro
shows it in ``--help``); ``__post_init__`` validates values and raises
:class:`prm_gym.core.errors.ConfigError` naming the field and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from prm_gym.core.errors import ConfigError


def check(ok: bool, name: str, value: Any, fix: str) -> None:
    """Raise a ConfigError naming the field ``name``, its ``value`` and the ``fix`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{name}={value!r} is invalid: {fix}.")


def parse_json_kwargs(name: str, text: str) -> dict[str, Any]:
    """The JSON object in ``text`` (empty text: ``{}``); a ConfigError naming ``name`` otherwise."""
    check(isinstance(text, str), name, text, "give the keyword arguments as a JSON string")
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} must be a JSON object such as '{{\"levels\": [1]}}': {exc}.") from exc
    check(isinstance(value, dict), name, text, "give a JSON object such as '{\"levels\": [1]}'")
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
        check(self.max_new_tokens >= 1, "sampling.max_new_tokens", self.max_new_tokens, "use a value >= 1")
        check(self.temperature >= 0, "sampling.temperature", self.temperature, "use a value >= 0")
        check(
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
    """Deprecated: train-agent takes the outcome terms from the judges (each declares its kind: outcome
    when scored on the final turn, process when scored every turn); another value here overrides them.
    Every other term is a per-turn process reward."""
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
    activation_checkpointing: bool = False
    """Keep only each decoder layer's input in the forward pass and recompute the rest in the
    backward pass (transformers' gradient checkpointing): the same gradients, about a third more
    learner compute, and activation memory of one layer instead of all of them."""
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
    igpo: Literal["off", "joint", "separate"] = "off"
    """IGPO's advantages as its authors compute them (Wang et al. 2025; GuoqingWang1/IGPO core_algos.py
    compute_grpo_outcome_advantage): each turn's reward (information gain; the outcome on the last turn)
    z-scored in the group, outcomes and gains together (joint) or apart (separate), then summed with
    discount gamma from each turn on; no separate outcome advantage, and process_coef must stay 1
    (off: the outcome advantage plus process_coef times the normalised process reward-to-go)."""
    igpo_no_answer: float = -2.0
    """With igpo: the outcome of an episode that ended without an answer (truncated, or not
    terminated), replacing its last turn's reward (the authors' compute_f1 returns -2.0)."""
    prime: bool = False
    """PRIME (Cui et al. 2025): an implicit PRM, initialised from the policy and trained online on the
    outcome labels, gives token rewards; advantages are PRIME's leave-one-out estimate (eq. 5)."""
    prime_beta: float = 0.05
    """PRIME's implicit-reward coefficient beta."""
    prime_lr: float = 1e-6
    """Learning rate of the PRM's own AdamW optimiser."""

    def __post_init__(self) -> None:
        check(0 <= self.clip_low < 1, "loss.clip_low", self.clip_low, "use a value in [0, 1)")
        check(self.clip_high >= 0, "loss.clip_high", self.clip_high, "use a value >= 0")
        check(self.kl_coef >= 0, "loss.kl_coef", self.kl_coef, "use a value >= 0")
        check(0 < self.gamma <= 1, "loss.gamma", self.gamma, "use a discount in (0, 1]")
        check(self.is_cap >= 1, "loss.is_cap", self.is_cap, "use a cap >= 1")
        check(self.updates_per_batch >= 1, "loss.updates_per_batch", self.updates_per_batch, "use >= 1")
        check(self.micro_batch_size >= 1, "loss.micro_batch_size", self.micro_batch_size, "use >= 1")
        check(self.max_grad_norm >= 0, "loss.max_grad_norm", self.max_grad_norm, "use >= 0 (0 disables)")
        check(self.overlong_buffer >= 0, "loss.overlong_buffer", self.overlong_buffer, "use >= 0 (0 disables)")
        check(self.overlong_penalty >= 0, "loss.overlong_penalty", self.overlong_penalty, "use >= 0")
        check(
            self.igpo == "off" or self.process_coef == 1.0,
            "loss.process_coef",
            self.process_coef,
            "leave it at 1 with --loss.igpo (IGPO's z-scoring sets the gains' strength; see docs/judges.md)",
        )
        check(self.prime_beta > 0, "loss.prime_beta", self.prime_beta, "use a value > 0 such as 0.05")
        check(self.prime_lr > 0, "loss.prime_lr", self.prime_lr, "use a learning rate > 0 such as 1e-6")


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
        check(self.max_resample_rounds >= 1, "recipes.max_resample_rounds", self.max_resample_rounds, "use >= 1")
        check(self.roc_oversample >= 1, "recipes.roc_oversample", self.roc_oversample, "use >= 1 (1 disables)")
        check(
            0 <= self.difficulty_low < self.difficulty_high <= 1,
            "recipes.difficulty_low",
            (self.difficulty_low, self.difficulty_high),
            "use 0 <= difficulty_low < difficulty_high <= 1",
        )
        check(0 < self.curriculum_promote <= 1, "recipes.curriculum_promote", self.curriculum_promote, "use (0, 1]")
        check(0 <= self.curriculum_target <= 1, "recipes.curriculum_target", self.curriculum_target, "use [0, 1]")


@dataclass(frozen=True)
class TreeConfig:
    """Tree-GRPO (Ji et al. 2025, arXiv 2509.21240, section 3.1): per task, ``num_trees`` trees whose
    nodes are whole agent turns; a task's leaves number ``num_trees * (1 + expand_nodes * expand_rounds)``,
    which ``group_size`` must equal (the run refuses a mismatch instead of ignoring it)."""

    num_trees: int = 2
    """Trees per task (M); each starts from one full episode."""
    expand_nodes: int = 1
    """Non-leaf nodes (turns) expanded per round and tree (N), drawn uniformly among the tree's distinct ones."""
    expand_rounds: int = 1
    """Expansion rounds (L); each adds N leaves per tree, so a tree has 1 + N*L leaves."""
    expand_root: bool = False
    """Make the root (the bare prompt) an expansion candidate every round, as the authors' code does
    (AMAP-ML/Tree-GRPO search_r1/llm_agent/tree_node.py:136); off: the root only when a tree has no
    non-leaf node."""
    expand_with_replacement: bool = False
    """Draw the N nodes with replacement, as the authors' code does (tree_node.py:140, random.choices);
    off: without replacement unless a tree has fewer than N candidates."""

    def __post_init__(self) -> None:
        check(self.num_trees >= 1, "tree.num_trees", self.num_trees, "use >= 1")
        check(self.expand_nodes >= 1, "tree.expand_nodes", self.expand_nodes, "use >= 1")
        check(self.expand_rounds >= 1, "tree.expand_rounds", self.expand_rounds, "use >= 1")

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
        check(self.max_staleness >= 0, "async.max_staleness", self.max_staleness, "use >= 0")


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation: reward, success rate, pass@k and maj@k."""

    env_kwargs: str = '{"split": "test"}'
    """JSON keyword arguments for the held-out env (merged over --env-kwargs)."""
    tasks: str = ""
    """Held-out tasks, in the forms --tasks takes (empty: --tasks, or the env's generator, read with
    --eval.env-kwargs' split, so a dataset folder with a test split gives it)."""
    num_tasks: int = 0
    """Held-out tasks evaluated (the first ones of the held-out task set); 0: sized to the run
    (:func:`eval_size`: 8 under 10 steps, 16 under 50, else 32; 32 with --mode eval)."""
    samples: int = 0
    """Samples per task (n of pass@k); without --eval.k, pass@1 and pass@n are reported. 0: sized
    to the run (1 under 10 steps, 2 under 50, else 4; 4 with --mode eval; at least the largest --eval.k)."""
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
        check(self.num_tasks >= 0, "eval.num_tasks", self.num_tasks, "use >= 1 (0: sized to the run)")
        check(self.samples >= 0, "eval.samples", self.samples, "use >= 1 (0: sized to the run)")
        check(
            all(1 <= k <= (self.samples or k) for k in self.k),
            "eval.k",
            self.k,
            f"each k must be in [1, eval.samples={self.samples}]; raise --eval.samples to at least "
            f"{max(self.k, default=1)} (pass@k and maj@k need k samples per task)",
        )
        check(self.temperature >= 0, "eval.temperature", self.temperature, "use >= 0")
        check(self.every >= 0, "eval.every", self.every, "use >= 0")


def eval_size(steps: int, mode: str = "train") -> tuple[int, int]:
    """The held-out tasks and samples per task of an eval left at 0 (sized to the run), so a
    2-step run of a new env is not dominated by its evaluation: fewer than 10 steps 8 tasks x 1
    sample, fewer than 50 steps 16 x 2, else (and ``--mode eval``) 32 x 4, played before and after."""
    if mode == "eval" or steps >= 50:
        return 32, 4
    return (8, 1) if steps < 10 else (16, 2)


def sized_eval(cfg: EvalConfig, steps: int, mode: str = "train") -> EvalConfig:
    """``cfg`` with ``num_tasks`` and ``samples`` left at 0 set by :func:`eval_size` (samples: at
    least the largest ``k``)."""
    tasks, samples = eval_size(steps, mode)
    return replace(cfg, num_tasks=cfg.num_tasks or tasks, samples=cfg.samples or max(samples, *cfg.k, 1))


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
        check(self.rank >= 0, "lora.rank", self.rank, "use a rank >= 1 such as 16 (0 trains the whole model)")
        check(self.alpha > 0, "lora.alpha", self.alpha, "use a value > 0 such as 32")
        check(0 <= self.dropout < 1, "lora.dropout", self.dropout, "use a value in [0, 1)")
        check(
            self.rank == 0 or len(self.target_modules) > 0,
            "lora.target_modules",
            self.target_modules,
            "name the linear layers to adapt, e.g. --lora.target-modules q_proj v_proj",
        )
