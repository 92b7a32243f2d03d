"""Chunked log-probabilities: the same values and gradients as the full-vocabulary path, and never a
``(tokens, vocab)`` logits tensor larger than one chunk, in the forward or the backward pass."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from prm_gym.core.models import tiny_model
from prm_gym.training.update import chunked_logprobs, default_chunk, micro_logprobs

VOCAB = 32_000  # a real tokenizer's size: the logits, not the tiny model, dominate memory


class LargestTensor(TorchDispatchMode):
    """Records the bytes of the largest tensor any op creates while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


def _batch(vocab: int, rows: int = 4, width: int = 48) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, width), generator=gen)
    attn = torch.ones_like(ids)
    attn[-1, width - 7 :] = 0  # a right-padded row, as the batch builder makes them
    mask = torch.zeros(rows, width)
    mask[0, 10:30], mask[1, 20:], mask[2, 5:9], mask[3, 30 : width - 7] = 1, 1, 1, 1
    return ids, attn, mask


def _grads(model: Any, lp: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    (lp * mask * torch.linspace(-1, 1, mask.shape[1])).sum().backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_chunked_logprobs_equal_the_full_path_in_values_and_gradients(temperature: float) -> None:
    model = tiny_model(2000, seed=3, hidden=32, layers=2).train()
    ids, attn, mask = _batch(2000)
    full = micro_logprobs(model, ids, attn, temperature)  # (B, L, vocab) logits, no mask
    chunked = micro_logprobs(model, ids, attn, temperature, mask=mask, chunk_tokens=5)
    assert torch.allclose(chunked * mask, full * mask, atol=1e-5, rtol=0)
    assert torch.all(chunked[mask == 0] == 0)
    for g_full, g_chunked in zip(_grads(model, full, mask), _grads(model, chunked, mask), strict=True):
        assert torch.allclose(g_chunked, g_full, atol=1e-5, rtol=1e-4)


def test_chunked_logprobs_match_token_logprobs_without_grad() -> None:
    head = torch.nn.Linear(16, 300, bias=False)
    hidden = torch.randn(23, 16, generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, 300, (23,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = torch.log_softmax(head(hidden) / 0.5, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
        got = chunked_logprobs(hidden, head, targets, 0.5, chunk=4)
    assert torch.allclose(got, want, atol=1e-6)
    assert chunked_logprobs(hidden[:0], head, targets[:0], 0.5).shape == (0,)


def test_an_update_never_holds_more_than_one_chunk_of_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unchunked path (still taken by a DDP/FSDP-wrapped model) projects every trained position
    of the micro-batch at once: a ``(rows, positions, vocab)`` fp32 tensor (here 4 x 43 x 32k x 4 B =
    22 MB, and its log-softmax and gradient alike). Chunked, the largest tensor of the forward and
    backward is one chunk's logits (or the embedding's gradient, which is the weight's size)."""
    from prm_gym.training import update

    model = tiny_model(VOCAB, seed=0, hidden=16, layers=1).train()
    ids, attn, mask = _batch(VOCAB)
    chunk = 8
    bound = max(chunk * VOCAB * 4, VOCAB * 16 * 4)
    with LargestTensor() as seen:
        lp = micro_logprobs(model, ids, attn, 1.0, mask=mask, chunk_tokens=chunk)
        (lp * mask).sum().backward()
    assert seen.largest <= bound, seen.largest
    monkeypatch.setattr(update, "_output_layer", lambda _model: None)  # the unchunked projection
    with LargestTensor() as old:
        lp = micro_logprobs(model, ids, attn, 1.0, mask=mask)
        (lp * mask).sum().backward()
    assert old.largest > 8 * bound  # the bound fails on the old path


def test_default_chunk_is_about_16m_logits() -> None:
    assert default_chunk(49_152) == 341
    assert default_chunk(10**9) == 1


def test_activation_checkpointing_gives_the_same_update() -> None:
    from prm_gym.training.batch import Batch
    from prm_gym.training.config import LossConfig
    from prm_gym.training.update import learner_step

    ids, attn, mask = _batch(500)
    batch = Batch(ids, attn, mask, torch.full(ids.shape, -3.0), torch.randn(ids.shape), torch.zeros(4), {})
    after = []
    for recompute in (False, True):
        model = tiny_model(500, seed=3, hidden=32, layers=2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        cfg = LossConfig(micro_batch_size=2, activation_checkpointing=recompute)
        stats = learner_step(model, opt, batch, cfg)
        after.append((stats["loss"], [p.detach().clone() for p in model.parameters()]))
        assert not model.is_activation_checkpointing and not model.training
    (loss_a, params_a), (loss_b, params_b) = after
    assert loss_a == pytest.approx(loss_b, abs=1e-6)
    for a, b in zip(params_a, params_b, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_recomputing_keeps_fewer_activations_for_the_backward() -> None:
    from prm_gym.training.update import recomputing

    ids, attn, _ = _batch(500)
    saved = {}
    for on in (False, True):
        model = tiny_model(500, seed=3, hidden=32, layers=4).train()
        count = [0]

        def pack(t: torch.Tensor, count: list[int] = count) -> torch.Tensor:
            count[0] += t.numel()
            return t

        with recomputing(model, on), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(input_ids=ids, attention_mask=attn, use_cache=False)
        saved[on] = count[0]
        assert not model.is_activation_checkpointing
    assert saved[True] < saved[False] / 2


def test_sft_with_recompute_trains_the_same_with_recomputation_on() -> None:
    from prm_gym.training.sft import sft

    ids, _, mask = _batch(500)
    demos = [(row.tolist(), m.int().tolist()) for row, m in zip(ids, mask, strict=True)]
    after = []
    for recompute in (False, True):
        model = tiny_model(500, seed=3, hidden=32, layers=2)
        seen: list[bool] = []

        def look(_: int, model: Any = model, seen: list[bool] = seen) -> None:
            seen.append(model.is_activation_checkpointing)

        loss = sft(model, demos, 2, 0.1, 2, 0, False, every=1, checkpoint=look, recompute=recompute)
        assert seen == [recompute, recompute]
        after.append((loss, [p.detach().clone() for p in model.parameters()]))
        assert not model.is_activation_checkpointing and not model.training
    (loss_a, params_a), (loss_b, params_b) = after
    assert loss_a == pytest.approx(loss_b, abs=1e-6)
    for a, b in zip(params_a, params_b, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
