"""HFPolicy's fast paths: one prefill for equal prompts, and a bfloat16 sampling copy."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from prm_gym.agents.hf import HFPolicy
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


def test_forget_empties_the_bf16_copy_until_the_next_call_refills_it(model: Any, tiny_tokenizer: Any) -> None:
    prompts = [tiny_tokenizer.encode(f"hi {i}") for i in range(3)]
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    policy = HFPolicy(model, tiny_tokenizer, seed=4, sample_dtype="bfloat16")
    first = policy.generate(prompts, params)
    fast = policy.sampler_model()
    policy.forget()  # the learner's turn: the copy's weights leave memory, its modules stay
    assert all(p.numel() == 0 for p in fast.parameters()) and policy._prefixes is None
    policy.reseed(4)
    again = policy.generate(prompts, params)
    assert policy.sampler_model() is fast
    for f, m in zip(fast.parameters(), model.parameters(), strict=True):
        assert f.dtype == torch.bfloat16 and torch.equal(f, m.to(torch.bfloat16))
    assert fast.get_input_embeddings().weight is fast.get_output_embeddings().weight  # still tied
    assert [g.token_ids for g in again] == [g.token_ids for g in first]


def _turns(policy: HFPolicy, prompts: list[list[int]], tokenizer: Any, params: SamplingParams) -> list[list[Any]]:
    """Three turns of each prompt: each next prompt is the last one + its generation + a tool result."""
    out = []
    for turn in range(3):
        gens = policy.generate(prompts, params)
        out.append(gens)
        prompts = [p + g.token_ids + tokenizer.encode(f" result {turn} ") for p, g in zip(prompts, gens, strict=True)]
    return out


def test_next_turns_prefill_only_their_new_ids_and_sample_as_if_recomputed(model: Any, tiny_tokenizer: Any) -> None:
    system = tiny_tokenizer.encode("<|im_start|>system\nYou are a careful assistant that solves tasks.<|im_end|>\n")
    prompts = [system + tiny_tokenizer.encode(f"What is {i} + {3 * i}?") for i in range(4)]
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    widths: list[tuple[int, int]] = []
    model.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(tuple(kw["input_ids"].shape)) if kw["input_ids"].shape[1] > 1 else None,
        with_kwargs=True,
    )
    fast = _turns(HFPolicy(model, tiny_tokenizer, seed=5), prompts, tiny_tokenizer, params)
    longest = max(len(p) for p in prompts)
    assert widths[0][0] == 1 and widths[0][1] >= len(system)  # the shared system prompt: one prefill row
    assert widths[1][1] < longest  # then only the rest of each prompt
    assert all(w <= 6 + len(tiny_tokenizer.encode(" result 1 ")) for _, w in widths[2:])  # later turns: new ids only
    widths.clear()
    slow = _turns(HFPolicy(model, tiny_tokenizer, seed=5, reuse_prefixes=False), prompts, tiny_tokenizer, params)
    assert all(w >= longest for _, w in widths)  # every turn prefilled whole
    for turn_fast, turn_slow in zip(fast, slow, strict=True):
        for a, b in zip(turn_fast, turn_slow, strict=True):
            assert a.token_ids == b.token_ids
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_a_weights_update_drops_the_kept_prefixes(model: Any, tiny_tokenizer: Any) -> None:
    policy = HFPolicy(model, tiny_tokenizer)
    [g] = policy.generate([tiny_tokenizer.encode("hello there")], GREEDY)
    assert policy._prefixes is not None and policy._prefixes.entries
    policy.version += 1
    seen = _prefill_rows(model)
    policy.generate([tiny_tokenizer.encode("hello there") + g.token_ids + [5, 6]], GREEDY)
    assert seen == [1]  # prefilled whole: nothing kept from the old weights was used


def test_finished_rows_leave_the_batch_and_nothing_sampled_changes(
    model: Any, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import prm_gym.agents.hf as hf

    prompts = [tiny_tokenizer.encode(f"Question {i}: what is {i} * {i + 7}?") for i in range(8)]
    stop = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")  # random rows stop at different lengths
    params = SamplingParams(max_new_tokens=24, temperature=1.0, stop=stop)
    batch: list[int] = []
    model.register_forward_pre_hook(
        lambda _m, _a, kw: batch.append(kw["input_ids"].shape[0]) if kw["input_ids"].shape[1] == 1 else None,
        with_kwargs=True,
    )
    packed = _turns(HFPolicy(model, tiny_tokenizer, seed=7), prompts, tiny_tokenizer, params)
    packed_batches = list(batch)
    lengths = sorted(len(g.token_ids) for g in packed[0])
    assert lengths[0] < lengths[-1]  # the rows did stop at different steps
    assert min(packed_batches) < len(prompts)  # and the stopped ones left the batch
    batch.clear()
    monkeypatch.setattr(hf, "COMPACT_AT", 0.0)  # never re-pack: every row stays until the last one stops
    whole = _turns(HFPolicy(model, tiny_tokenizer, seed=7), prompts, tiny_tokenizer, params)
    assert set(batch) == {len(prompts)} and sum(batch) > sum(packed_batches)
    for turn_packed, turn_whole in zip(packed, whole, strict=True):  # the same ids, log-probs and reasons,
        for a, b in zip(turn_packed, turn_whole, strict=True):  # the kept caches of later turns included
            assert (a.token_ids, a.finish_reason) == (b.token_ids, b.finish_reason)
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_the_roomy_cache_computes_what_transformers_cache_does_without_copying_per_step(
    model: Any, tiny_tokenizer: Any
) -> None:
    from transformers.cache_utils import DynamicCache

    from prm_gym.agents.kv_cache import new_cache, plain_layers, roomy_layer_class

    ids = torch.tensor([tiny_tokenizer.encode("What is 12 * 7? Use the tool.")] * 3)
    ids[1, :2] = 0
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    logits: dict[str, list[torch.Tensor]] = {}
    for name, cache in (("plain", DynamicCache()), ("roomy", new_cache(model, room=4))):
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True)
            seen, m = [out.logits[:, -1]], mask
            buffers = {x._k.data_ptr() for x in plain_layers(cache) or []} if name == "roomy" else set()
            for step in range(7):  # past the room of 4: the buffers move once, then hold again
                if step == 2:
                    cache.reorder_cache(torch.tensor([2, 0, 0]))  # rows picked and repeated
                    m = m[torch.tensor([2, 0, 0])]
                m = torch.cat([m, torch.ones((3, 1), dtype=m.dtype)], dim=-1)
                tok = seen[-1].argmax(-1, keepdim=True)
                pos = m.sum(-1, keepdim=True) - 1
                out = model(input_ids=tok, attention_mask=m, position_ids=pos, cache=cache, use_cache=True)
                seen.append(out.logits[:, -1])
                if name == "roomy" and step in (1, 3):  # no new buffer while the room lasts
                    assert {x._k.data_ptr() for x in plain_layers(cache) or []} == buffers
                if name == "roomy" and step == 2:
                    buffers = {x._k.data_ptr() for x in plain_layers(cache) or []}
        logits[name] = seen
    assert all(type(x) is roomy_layer_class() for x in plain_layers(new_cache(model, 1)) or [None])
    for a, b in zip(logits["plain"], logits["roomy"], strict=True):
        assert torch.equal(a, b)


def test_the_sampler_decodes_into_roomy_caches(model: Any, tiny_tokenizer: Any) -> None:
    from prm_gym.agents.kv_cache import roomy_layer_class

    kinds: list[set[type]] = []
    model.register_forward_pre_hook(
        lambda _m, _a, kw: kinds.append({type(x) for x in kw["cache"].layers}) if kw.get("cache") else None,
        with_kwargs=True,
    )
    HFPolicy(model, tiny_tokenizer).generate([tiny_tokenizer.encode("hello there")] * 2, GREEDY)
    assert kinds and all(k == {roomy_layer_class()} for k in kinds)


def test_models_without_plain_full_attention_layers_keep_their_own_cache() -> None:
    from types import SimpleNamespace

    from transformers import MistralConfig

    from prm_gym.agents.kv_cache import new_cache

    sliding = MistralConfig(num_hidden_layers=2, sliding_window=8, hidden_size=32, num_attention_heads=2)
    assert new_cache(SimpleNamespace(config=sliding), room=4) is None  # sliding-window layers: transformers' cache
    assert new_cache(SimpleNamespace(), room=4) is None  # no transformers config: the model's own cache
    full = MistralConfig(num_hidden_layers=2, sliding_window=None, hidden_size=32, num_attention_heads=2)
    assert len(new_cache(SimpleNamespace(config=full), room=4).layers) == 2


def test_looking_at_the_ids_every_8_steps_samples_the_same_turns_with_a_host_sync_per_8_steps(
    model: Any, tiny_tokenizer: Any
) -> None:
    """A GPU's token loop looks at its ids every ``SYNC_EVERY`` steps: rows that stopped in between
    are cut at their stop, the RNG is rewound past the steps nobody needed, and two turns of an
    episode (the second extending the first's kept caches) and a third call come out as with a
    look at every step, the host waiting for the device about once per 8 steps."""
    from prm_gym.core.device_guard import device_guard

    system = tiny_tokenizer.encode("You are a careful calculator. Think, then answer in one line. " * 2)
    prompts = [system + tiny_tokenizer.encode(q) for q in ("2+2?", "2+2?", "7*6?", "10-3?", "1+1?")]
    params = SamplingParams(max_new_tokens=32, temperature=1.0, stop=("</tool_call>", "e"))
    short = SamplingParams(max_new_tokens=32, temperature=1.0, stop=(*"aeiou ", *"0123456789"))
    turns = {}
    for sync in (1, 8):
        policy = HFPolicy(model, tiny_tokenizer, seed=5, sync_every=sync)
        with device_guard() as guard:
            first = policy.generate(prompts, short)  # every row stops early, most between two looks
            follow = [
                p + g.token_ids + tiny_tokenizer.encode(" result: 4. ") for p, g in zip(prompts, first, strict=True)
            ]
            second = policy.generate(follow, params)
            third = policy.generate(prompts, params)  # the RNG carried on from the same state
        turns[sync] = [(g.token_ids, g.logprobs, g.finish_reason) for g in first + second + third]
        syncs = guard.syncs["prm_gym/agents/hf.py"]
    assert [(ids, f) for ids, _, f in turns[1]] == [(ids, f) for ids, _, f in turns[8]]
    for (_, every, _), (_, eighth, _) in zip(turns[1], turns[8], strict=True):
        assert eighth == pytest.approx(every, abs=1e-5)  # rows leave the batch at other steps: float rounding
    assert {f for _, _, f in turns[8]} == {"stop", "length"}  # rows stopped between looks, and rows ran out
    assert all(f == "stop" for _, _, f in turns[8][:5]) and max(len(ids) for ids, _, _ in turns[8][:5]) % 8
    assert syncs <= 3 * (32 // 8 + 3)  # three calls: the prompt mask, a look every 8 steps, the log-probs
