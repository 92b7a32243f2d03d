"""``compare --task search``: the comparisons on prm/Search-v0 multi-hop questions, sparse outcome.

The env is :data:`experiments.search_demos.ENV_KWARGS` (multi-hop questions only: two or
three searches, the answer reachable only through a bridge entity) judged by exact match alone
(``rule/exact_match``: 1 for the right answer, 0 otherwise, nothing per turn), unless an arm adds a
turn-level term. Every seed's warm start is SFT on demonstrations played through the real env
(:func:`experiments.search_demos.search_demonstrations`: the right search for each gold hop,
then the gold answer).

Arms (run names are shared between comparisons, so a run is trained once and read twice):

* ``tree-grpo``: Tree-GRPO, M trees of N nodes per round, L rounds (``M*(1+N*L)`` leaves).
* ``grpo`` (chain GRPO, as many trajectories per task as the trees' leaves): equal steps and
  equal trajectories; also the *outcome only* arm of the process comparison.
* ``grpo-tokens`` (chain GRPO, equal generated tokens per step): a group of
  ``round(M * (1 + N*L*f))`` episodes, ``f`` (``--branch-fraction``) being the share of an episode a
  branch regenerates. With nodes drawn uniformly among boundaries 1..T-1 of a T-turn episode a
  branch regenerates ``(T-k)/T`` of it, ``1/2`` on average for any T, so ``f = 0.5``; the tokens
  each arm really generated are in its summary row, to check the match.
* ``retrieval``: exact match plus ``--retrieval-weight`` times ``rule/retrieval`` (the share of the
  gold passages a turn retrieved first), a turn-level process term.
* ``info-gain``: exact match plus ``--info-gain-weight`` times IGPO's information gain
  (``progress/info_gain``, ``final="gain"``: the change of the policy's probability of the gold
  answer on each turn). The measuring model is the seed's warm start, frozen (IGPO measures the
  current policy; a frozen copy keeps the judge out of the learner's update).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from experiments.compare_config import study_config
from experiments.search_demos import ENV_ID, ENV_KWARGS, search_demonstrations, unseen_questions
from prm_gym.training.config import TrainConfig, TreeConfig

OUTCOME = "rule/exact_match"
COMPARISONS: dict[str, dict[str, str]] = {
    # paired differences are read against the first arm
    "tree": {
        "Tree-GRPO": "tree-grpo",
        "chain GRPO, equal tokens per step": "grpo-tokens",
        "chain GRPO, equal trajectories": "grpo",
        "Tree-GRPO, authors' node draw (root a candidate, with replacement)": "tree-grpo-authors",
    },
    "process": {
        "outcome only": "grpo",
        "retrieval credit": "retrieval",
        "IGPO information gain": "info-gain",
        "IGPO as its authors run it": "info-gain-authors",
    },
}
"""Comparison -> arm label -> run name."""


def chain_group_for_tokens(tree: TreeConfig, branch_fraction: float) -> int:
    """Chain GRPO's group size that generates about as many tokens per task as ``tree``'s leaves."""
    return max(2, round(tree.num_trees * (1 + tree.expand_nodes * tree.expand_rounds * branch_fraction)))


def warm_dir(args: argparse.Namespace, seed: int) -> Path:
    """Where the seed's warm start is saved (one per model and seed): ``<output-dir>/warm/<model>/seed<k>``."""
    tiny = f"tiny-{args.hidden}x{args.layers}" + ("-domain" if args.tokenizer == "domain" else "")
    slug = re.sub(r"[^A-Za-z0-9.-]+", "-", args.policy if args.policy != "hf:tiny" else tiny)
    return Path(args.output_dir) / "warm" / slug / f"seed{seed}"


def warm_start(args: argparse.Namespace, seed: int) -> Path:
    """The seed's SFT warm start on search demonstrations (a transformers directory), trained once on
    ``--device``."""
    import torch

    from experiments import demo as learn
    from experiments.search_tokenizer import domain_tokenizer
    from prm_gym.agents.chat import ChatTemplate
    from prm_gym.core.models import tiny_model
    from prm_gym.training.sft import sft

    out = warm_dir(args, seed)
    if (out / "sft" / "config.json").exists():
        return out / "sft"
    largs = argparse.Namespace(
        policy=args.policy, seed=seed, hidden=args.hidden, layers=args.layers, device=args.device
    )
    torch.manual_seed(seed)
    if args.policy == "hf:tiny" and args.tokenizer == "domain":
        tok = domain_tokenizer()
        model = tiny_model(len(tok), seed=seed, hidden=args.hidden, layers=args.layers, heads=4).to(args.device)
    else:
        model, tok = learn.base_model(largs)
    chat = ChatTemplate(tok, tools_block="compact")
    demos, reward = search_demonstrations(chat, args.demos, {"judge": OUTCOME})
    loss = sft(model, demos, args.sft_steps, args.sft_lr, args.sft_batch, seed, True)
    print(f"search SFT warm start: {len(demos)} demonstrations (reward {reward:.2f}), final loss {loss:.3f}")
    path = out / "sft"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def base_config(args: argparse.Namespace, policy_dir: Path, seed: int) -> TrainConfig:
    """What every search arm shares: the env, the warm start, one learning rate, one eval."""
    tree = TreeConfig(num_trees=args.trees, expand_nodes=args.expand_nodes, expand_rounds=args.expand_rounds)
    cfg = study_config(
        args,
        seed,
        tree,
        2048,
        env=ENV_ID,
        env_kwargs=json.dumps(ENV_KWARGS),
        judge=OUTCOME,
        policy=f"{args.sampler}:{policy_dir}",
        tool_format="hermes",
    )
    if not args.eval_unseen:
        return cfg
    heldout = unseen_questions(args.eval_unseen, Path(args.output_dir) / f"heldout-unseen-{args.eval_unseen}.jsonl")
    return replace(cfg, eval=replace(cfg.eval, tasks=str(heldout.resolve()), num_tasks=args.eval_unseen))


def arm_config(name: str, base: TrainConfig, args: argparse.Namespace) -> TrainConfig:
    """The search run ``name``: the base config with the one thing its arm changes."""
    if name == "grpo":
        return base
    if name == "tree-grpo":
        return replace(base, algo="tree-grpo")
    if name == "grpo-tokens":
        return replace(base, group_size=chain_group_for_tokens(base.tree, args.branch_fraction))
    if name == "retrieval":
        return replace(base, judge=f"{OUTCOME} + {args.retrieval_weight}*rule/retrieval")
    if name == "info-gain":
        policy_dir = base.policy.split(":", 1)[1]
        judge_kwargs: dict[str, Any] = {
            "progress/info_gain": {"policy": f"hf:{policy_dir}", "final": "gain", "outcome": "exact"}
        }
        kw = {**json.loads(base.env_kwargs), "judge_kwargs": judge_kwargs}
        return replace(base, judge=f"{OUTCOME} + {args.info_gain_weight}*progress/info_gain", env_kwargs=json.dumps(kw))
    if name == "tree-grpo-authors":  # AMAP-ML/Tree-GRPO tree_node.py:136-140
        return replace(base, algo="tree-grpo", tree=replace(base.tree, expand_root=True, expand_with_replacement=True))
    if name == "info-gain-authors":  # GuoqingWang1/IGPO: see prm_gym.rewards.info_gain
        authors = {"policy": "current", "final": "outcome", "belief": "span", "outcome": "f1"}
        kw = {**json.loads(base.env_kwargs), "judge_kwargs": {"progress/info_gain": authors}}
        loss = replace(base.loss, igpo=args.igpo_norm, process_coef=1.0)
        # held-out success is the exact answer whatever an arm trains on: evaluate with the outcome judge
        # (this arm's own judge scores the answer turn by F1 under its own term, which success does not read)
        ev = {**json.loads(base.eval.env_kwargs), "judge": OUTCOME, "judge_kwargs": {}}
        evaluation = replace(base.eval, env_kwargs=json.dumps(ev))
        return replace(base, judge="progress/info_gain", env_kwargs=json.dumps(kw), loss=loss, eval=evaluation)
    raise ValueError(f"no search arm named {name!r}")
