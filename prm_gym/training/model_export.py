"""Trained weights in the formats the ecosystem loads, written beside every checkpoint.

``checkpoint.pt`` is the run's resumable state (weights, AdamW moments, step, config). Next to it
every checkpoint writes what transformers, peft and vLLM read directly:

* ``<run>/model/``: without LoRA, a transformers folder (``save_pretrained``: ``config.json``,
  ``model.safetensors``, the tokenizer and its chat template);
* ``<run>/adapter/``: with ``--lora.rank``, a peft adapter folder (``adapter_config.json``,
  ``adapter_model.safetensors``, the tokenizer) whose ``base_model_name_or_path`` names a
  transformers folder of the frozen base: the ``--policy`` directory itself when it is one, else
  ``<run>/base/``, written once (``hf:tiny``, ``hf:smollm2-135m``'s de-quantised GGUF, or a base
  changed by ``--init-checkpoint``).

Each folder is written to a temporary folder in the run directory and swapped into place, so a
reader sees the previous export or the new one, never a half-written folder.
:func:`prm_gym.core.models.model_dir` resolves a run directory to the folder to load.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from prm_gym.core.errors import ConfigError
from prm_gym.core.models import ADAPTER_DIR, BASE_DIR, MODEL_DIR, model_dir
from prm_gym.core.policy_spec import PolicySpec
from prm_gym.training.lora import is_lora, save_adapter


def export_model(model: Any, tokenizer: Any, run_dir: str | Path, policy_id: str, init_checkpoint: str = "") -> Path:
    """Write ``model`` (and ``tokenizer``) into ``run_dir`` as ``model/`` or, with LoRA, ``adapter/``
    (and ``base/`` once, when the base has no folder of its own); returns the folder written."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    if not is_lora(model):
        return _swap_in(run / MODEL_DIR, lambda tmp: _save_full(model, tokenizer, tmp))
    base = _base_folder(model, tokenizer, run, policy_id, init_checkpoint)

    def write(tmp: Path) -> None:
        save_adapter(model, tmp)
        config_file = tmp / "adapter_config.json"
        config = json.loads(config_file.read_text())
        config["base_model_name_or_path"] = str(base)
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True))
        tokenizer.save_pretrained(str(tmp))

    return _swap_in(run / ADAPTER_DIR, write)


def _save_full(model: Any, tokenizer: Any, out: Path) -> None:
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def _base_folder(model: Any, tokenizer: Any, run: Path, policy_id: str, init_checkpoint: str) -> Path:
    """The transformers folder of a LoRA run's frozen base: the ``hf:<dir>`` policy's own folder,
    else ``<run>/base/`` (written the first time)."""
    spec = PolicySpec.parse(policy_id)
    name = spec.target if spec.kind == "hf" else ""
    if name not in ("", "tiny", "smollm2-135m") and not init_checkpoint:
        try:
            own = model_dir(name)  # a model folder, or a run directory's model/
        except ConfigError:
            own = None
        if own is not None and (own / "config.json").exists():
            return own.resolve()
    target = run / BASE_DIR
    if not (target / "config.json").exists():
        _swap_in(target, lambda tmp: _save_full(base_model(model), tokenizer, tmp))
    return target.resolve()


@torch.no_grad()
def base_model(model: Any) -> Any:
    """A plain transformers model holding the frozen base weights of a LoRA ``model``."""
    from transformers import AutoModelForCausalLM

    state = {k.replace(".base_layer.", "."): v for k, v in model.state_dict().items() if ".lora_" not in k}
    plain = AutoModelForCausalLM.from_config(model.config, dtype=next(model.parameters()).dtype)
    plain.load_state_dict(state)
    return plain


def _swap_in(target: Path, write: Any) -> Path:
    """Run ``write(tmp)`` on a fresh folder beside ``target``, then move it into ``target``'s place."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-new-", dir=target.parent))
    try:
        write(tmp)
        old = target.parent / f".{target.name}-old"
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for stale in target.parent.glob(f".{target.name}-new-*"):  # left by a process killed mid-write
        shutil.rmtree(stale, ignore_errors=True)
    return target
