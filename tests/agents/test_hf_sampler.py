"""HFPolicy's fast paths: one prefill for equal prompts, and a bfloat16 sampling copy."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from prm_gym.core.hf import HFPolicy
from prm_gym.core.models import tiny_model
from prm_gym.core.policy import SamplingParams

GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)


@pytest.fixture()
def model(tiny_tokenizer: Any) -> Any:
    return tiny_model(len(tiny_tokenizer), seed=3).eval()


def _prefill_rows(model: Any) -> list[int]:
    """Records the batch size of every multi-token forward (the prefills) of ``model``."""
    seen: list[int] = []

    def hook(_mod: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs["input_ids"]
        if ids.shape[1] > 1:
            seen.append(int(ids.shape[0]))

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def test_equal_prompts_share_one_prefill_and_sample_as_if_alone(model: Any, tiny_tokenizer: Any) -> None:
    p, q = tiny_tokenizer.encode("What is 2 + 2?"), tiny_tokenizer.encode("Solve x")
    alone = {tuple(x): HFPolicy(model, tiny_tokenizer).generate([x], GREEDY)[0] for x in (p, q)}
    rows = _prefill_rows(model)
    gens = HFPolicy(model, tiny_tokenizer).generate([p, p, q, p], GREEDY)
    assert rows == [2]  # two distinct prompts, one prefill row each
    for prompt, g in zip([p, p, q, p], gens, strict=True):
        ref = alone[tuple(prompt)]
        assert g.token_ids == ref.token_ids
        assert g.logprobs == pytest.approx(ref.logprobs, abs=1e-4)


def test_bf16_sampler_copies_the_weights_and_refreshes_when_the_version_moves(model: Any, tiny_tokenizer: Any) -> None:
    policy = HFPolicy(model, tiny_tokenizer, sample_dtype="bfloat16")
    [g] = policy.generate([tiny_tokenizer.encode("hi")], SamplingParams(max_new_tokens=6, temperature=1.0))
    fast = policy.sampler_model()
    assert fast is not model and fast.dtype == torch.bfloat16 and model.dtype == torch.float32
    assert len(g.token_ids) > 0 and all(lp <= 0 for lp in g.logprobs)
    master, copy = next(model.parameters()), next(fast.parameters())
    with torch.no_grad():
        master.add_(1.0)
    assert not torch.equal(copy.float(), master.to(torch.bfloat16).float())  # same version: no copy yet
    policy.version += 1
    assert policy.sampler_model() is fast  # refreshed in place
    assert torch.equal(copy, master.to(torch.bfloat16))
    assert all(b.dtype == torch.float32 for b in fast.buffers() if b.is_floating_point())
