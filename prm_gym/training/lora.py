"""LoRA (Hu et al. 2021, *LoRA: Low-Rank Adaptation of Large Language Models*) through peft.

With ``--lora.rank r`` the learner's model gets peft's LoRA layers on ``--lora.target-modules``;
the base weights are frozen and the optimiser holds only the adapters. The model stays the same
transformers class (peft injects its layers in place), so sampling, the learner step, DDP and
evaluation see an ordinary causal LM. What changes:

* checkpoints hold the adapters and their AdamW moments only, with the LoRA settings; resuming
  (and ``--mode eval``) rebuild the base from ``--policy`` (and ``--init-checkpoint``) and load the
  adapters onto it (:func:`apply_checkpoint`);
* rollout workers that hold their own copy of the policy (asynchronous, Ray, the in-process vLLM
  engine) and vLLM servers get the adapters merged into full weights (:func:`merged_state_dict`),
  or, with ``--lora.publish adapter``, vLLM servers load the adapter itself (:func:`save_adapter`).

peft is an optional extra (``pip install 'prm-gym[lora]'``), imported only when LoRA is asked for.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from prm_gym.core.errors import ConfigError
from prm_gym.core.extras import require
from prm_gym.training.config import LoraConfig

ADAPTER = "default"  # peft's adapter name


def _peft() -> Any:
    return require("peft", "lora", "lora.rank: LoRA adapters")


def add_lora(model: Any, cfg: LoraConfig, seed: int = 0) -> Any:
    """``model`` with LoRA adapters on ``cfg.target_modules`` (base weights frozen), in place. The
    adapters' A matrices are drawn from ``seed`` (the global RNG is left alone), so a run is
    reproducible.

    Raises:
        ConfigError: peft is missing, or no module of the model matches ``cfg.target_modules``.
    """
    peft = _peft()
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    if not set(cfg.target_modules) & names:
        raise ConfigError(
            f"lora.target_modules={cfg.target_modules!r} matches no linear layer of the model; "
            f"its linear layers are {sorted(names)}."
        )
    config = peft.LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        wrapper = peft.get_peft_model(model, config)
    return wrapper.base_model.model  # the same model object, its target layers now LoRA layers


def is_lora(model: Any) -> bool:
    """True when ``model`` carries peft adapters."""
    return getattr(model, "peft_config", None) is not None


def trainable(model: Any) -> list[torch.nn.Parameter]:
    """The parameters the optimiser steps (all of them without LoRA; the adapters with it)."""
    return [p for p in model.parameters() if p.requires_grad]


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapters' tensors, under the model's own state-dict keys."""
    return {k: v for k, v in model.state_dict().items() if ".lora_" in k}


def load_adapter_state(model: Any, state: dict[str, Any]) -> None:
    """Load adapters saved by :func:`adapter_state`; every adapter of the model must be in ``state``.

    Raises:
        ConfigError: the adapters do not fit the model (another rank or target modules).
    """
    want = set(adapter_state(model))
    if set(state) != want:
        raise ConfigError(
            f"the checkpoint's LoRA adapters ({len(state)} tensors) do not fit this model's ({len(want)}): "
            "resume with the --lora.* settings and --policy the run was started with."
        )
    try:
        model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a shape mismatch: another rank
        raise ConfigError(f"the checkpoint's LoRA adapters do not fit this model: {exc}") from exc


@torch.no_grad()
def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The full weights of ``model`` with its adapters merged in (``W + B A * alpha / r``), under
    the plain model's keys; ``model`` itself is left as it is."""
    lora = _peft().tuners.lora.LoraLayer
    deltas = {
        f"{name}.base_layer.weight": module.get_delta_weight(ADAPTER)
        for name, module in model.named_modules()
        if isinstance(module, lora) and ADAPTER in module.lora_A
    }
    out: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        if ".lora_" in key:
            continue
        merged = value + deltas[key].to(value.dtype) if key in deltas else value
        out[key.replace(".base_layer.", ".")] = merged.detach()
    return out


def plain_copy(model: Any) -> Any:
    """A copy of ``model`` as a plain transformers model (adapters merged in); a deep copy without LoRA."""
    if not is_lora(model):
        return copy.deepcopy(model)
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    plain = AutoModelForCausalLM.from_config(config, dtype=next(model.parameters()).dtype)
    plain.load_state_dict(merged_state_dict(model))
    return plain.to(next(model.parameters()).device).eval()


def save_adapter(model: Any, path: str | Path) -> Path:
    """Save the adapters in peft's format (``adapter_config.json``, ``adapter_model.safetensors``),
    which ``peft.PeftModel.from_pretrained`` and vLLM's LoRA loading read."""
    peft = _peft()
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    config = model.peft_config[ADAPTER]
    config.save_pretrained(str(out))
    state = peft.utils.get_peft_model_state_dict(model, adapter_name=ADAPTER)
    save_file(
        {f"base_model.model.{k}": v.detach().cpu().contiguous() for k, v in state.items()},
        out / "adapter_model.safetensors",
    )
    return out


def apply_checkpoint(model: Any, state: dict[str, Any]) -> Any:
    """``model`` with a checkpoint's weights: its full state dict, or, for a LoRA run's checkpoint,
    its adapters added with the run's LoRA settings (returns the model, now with adapters)."""
    settings = state.get("lora")
    if not settings:
        model.load_state_dict(state["model"])
        return model
    if not is_lora(model):
        model = add_lora(model, LoraConfig(**{**settings, "target_modules": tuple(settings["target_modules"])}))
    load_adapter_state(model, state["model"])
    return model


def lora_settings(cfg: LoraConfig) -> dict[str, Any] | None:
    """What a checkpoint records of the LoRA settings (None: the whole model was trained)."""
    return json.loads(json.dumps(asdict(cfg))) if cfg.rank else None
