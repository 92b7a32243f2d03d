"""Shared-prefix attention: a prompt prefix every row starts with is held once and read once."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import prm_gym.agents.hf as hf
from prm_gym.agents import shared_prefix
from prm_gym.agents.hf import HFPolicy
from prm_gym.core.models import tiny_model
from prm_gym.core.policy import SamplingParams
from tests.agents.test_hf_sampler import _turns

SYSTEM = "<|im_start|>system\nYou are a careful assistant that solves tasks.<|im_end|>\n"


@pytest.fixture()
def model(tiny_tokenizer: Any) -> Any:
    return tiny_model(len(tiny_tokenizer), seed=3).eval()


def _reference(query: Any, key: Any, value: Any, allowed: Any, pk: Any, pv: Any) -> Any:
    """Plain SDPA over the prefix copied into every row, then the rows' keys (fp32)."""
    b, h, t, _ = query.shape
    rep = h // key.shape[1]
    keys = torch.cat([pk.expand(b, -1, -1, -1), key], 2).repeat_interleave(rep, 1).float()
    values = torch.cat([pv.expand(b, -1, -1, -1), value], 2).repeat_interleave(rep, 1).float()
    mask = torch.cat([torch.ones(b, 1, t, pk.shape[2], dtype=torch.bool), allowed], -1)
    out = torch.nn.functional.scaled_dot_product_attention(query.float(), keys, values, attn_mask=mask)
    return out.transpose(1, 2)


@pytest.mark.parametrize(("heads", "kv_heads", "queries"), [(9, 3, 1), (4, 4, 6), (6, 2, 4)])
def test_split_attention_equals_attention_over_the_copied_prefix(heads: int, kv_heads: int, queries: int) -> None:
    gen = torch.Generator().manual_seed(heads * 10 + queries)
    b, p, s, d = 3, 7, 9, 16
    q = torch.randn(b, heads, queries, d, generator=gen)
    k, v = torch.randn(b, kv_heads, s, d, generator=gen), torch.randn(b, kv_heads, s, d, generator=gen)
    pk, pv = torch.randn(1, kv_heads, p, d, generator=gen), torch.randn(1, kv_heads, p, d, generator=gen)
    causal = torch.arange(s)[None, :] <= torch.arange(queries)[:, None] + (s - queries)
    allowed = causal.expand(b, 1, queries, s).clone()
    allowed[0, :, :, :2] = False  # left padding
    allowed[1, :, 0, :] = False  # a padding query that sees none of the rows' keys: the prefix alone
    out = shared_prefix.split_attention(q, k, v, allowed, pk, pv, None)
    assert out.shape == (b, queries, heads, d)
    assert torch.allclose(out, _reference(q, k, v, allowed, pk, pv), atol=1e-5)
    causal_only = shared_prefix.split_attention(q, k, v, None, pk, pv, None)  # no mask: causal
    assert torch.allclose(causal_only, _reference(q, k, v, causal.expand(b, 1, queries, s), pk, pv), atol=1e-5)
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    assert torch.allclose(shared_prefix.split_attention(q, k, v, additive, pk, pv, None), out, atol=1e-6)


def test_the_sampler_holds_a_shared_prefix_once_and_samples_as_if_it_were_copied(
    model: Any, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = tiny_tokenizer.encode(SYSTEM)
    prompts = [system + tiny_tokenizer.encode(f"What is {i} + {3 * i}?") for i in range(5)]
    stop = list("aeiou")  # rows stop at different steps: some leave the batch mid-call
    params = SamplingParams(max_new_tokens=10, temperature=1.0, stop=stop)
    policy = HFPolicy(model, tiny_tokenizer, seed=11)
    seen: list[Any] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw.get("shared_prefix")), with_kwargs=True)
    split = _turns(policy, prompts, tiny_tokenizer, params)
    kept = policy._prefixes
    assert kept is not None and kept.prefix is not None
    lead = len(kept.prefix.ids)
    assert lead >= len(system) and all(p[:lead] == list(kept.prefix.ids) for p in prompts)
    assert kept.prefix.layers[0][0].shape[:3] == (1, model.config.num_key_value_heads, lead)  # held once
    for seq, layers in kept.entries.items():  # each row keeps only the ids after the prefix
        assert layers[0][0].shape[2] == len(seq) - lead
    assert seen[0] is None and all(x is kept.prefix.layers for x in seen[1:])  # every forward read it
    monkeypatch.setattr(hf, "_splits", lambda _model: False)
    copied = _turns(HFPolicy(model, tiny_tokenizer, seed=11), prompts, tiny_tokenizer, params)
    for turn_split, turn_copied in zip(split, copied, strict=True):
        for a, b in zip(turn_split, turn_copied, strict=True):
            assert (a.token_ids, a.finish_reason) == (b.token_ids, b.finish_reason)
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_a_prompt_that_leaves_the_prefix_gets_the_kept_caches_back_whole(model: Any, tiny_tokenizer: Any) -> None:
    system = tiny_tokenizer.encode(SYSTEM)
    prompts = [system + tiny_tokenizer.encode(f"Question {i}") for i in range(3)]
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    policy, plain = HFPolicy(model, tiny_tokenizer), HFPolicy(model, tiny_tokenizer, reuse_prefixes=False)
    first = policy.generate(prompts, greedy)
    assert policy._prefixes is not None and policy._prefixes.prefix is not None
    other = tiny_tokenizer.encode("No system prompt here at all")
    nxt = [prompts[0] + first[0].token_ids + tiny_tokenizer.encode(" ok "), other]
    got = policy.generate(nxt, greedy)
    want = plain.generate(nxt, greedy)
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_without_a_prefix_the_attention_is_sdpa_and_only_cpu_sdpa_models_switch(model: Any) -> None:
    ids = torch.randint(3, 60, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(input_ids=ids).logits
    assert shared_prefix.enable(model) and model.config._attn_implementation == shared_prefix.NAME
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, before)  # the learner's forwards: unchanged
    model(input_ids=ids).logits.sum().backward()  # and gradients flow through it
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    eager = tiny_model(len(model.get_input_embeddings().weight), seed=3)
    eager.set_attn_implementation("eager")
    assert not shared_prefix.enable(eager) and eager.config._attn_implementation == "eager"


def test_shared_prefix_attention_refuses_what_it_cannot_compute() -> None:
    from types import SimpleNamespace

    q, k = torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 3, 4)
    layer = SimpleNamespace(layer_idx=0)
    prefix = [(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))]
    with pytest.raises(ValueError, match="plain causal"):
        shared_prefix.attention(layer, q, k, k, None, shared_prefix=prefix, sliding_window=4)
