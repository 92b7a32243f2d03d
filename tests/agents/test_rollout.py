"""Chat rendering, policies and the episode loop, with the tiny in-process model."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
import torch

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import rollout, run_episode
from prm_gym.core.parsing import format_tool_call
from prm_gym.core.policy import FakePolicy, SamplingParams


def test_chat_prompt_and_observation_ids(tiny_tokenizer: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer)
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]
    text = tiny_tokenizer.decode(chat.prompt_ids("What is 2+2?", tools))
    assert text.startswith("<|im_start|>system\n") and '"name": "calc"' in text
    assert text.endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    eos = tiny_tokenizer.eos_token_id
    with_eos = tiny_tokenizer.decode(chat.observation_ids("OBS", [5, eos]))
    without = tiny_tokenizer.decode(chat.observation_ids("OBS", [5]))
    assert with_eos == "\n<|im_start|>user\nOBS<|im_end|>\n<|im_start|>assistant\n"
    assert without == "<|im_end|>" + with_eos
    assert chat.closing_ids([5, eos]) == []


def test_fake_policy_episode_masks_only_sampled_tokens(tiny_tokenizer: Any) -> None:
    env = gym.make("prm/Math-v0", levels=(1,))
    chat = ChatTemplate(tiny_tokenizer)
    call = format_tool_call("calculator", {"expression": "3*3"})
    policy = FakePolicy(tiny_tokenizer, [call, "<answer>9</answer>"])
    traj = run_episode(env, policy, chat, seed=0)
    assert traj.terminated and len(traj.turns) == 2
    assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.logprobs)
    sampled = [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
    eos = tiny_tokenizer.eos_token_id
    expected = [*chat.encode(call), eos, *chat.encode("<answer>9</answer>"), eos]
    assert sampled == expected
    first = traj.turns[0]
    assert tiny_tokenizer.decode(traj.token_ids[first.start : first.end], skip_special_tokens=True) == call
    assert traj.turns[0].observation == "<tool_response>\n9\n</tool_response>"
    masked_text = tiny_tokenizer.decode([t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if not m])
    assert "<tool_response>" in masked_text and "What is" in masked_text
    assert set(traj.turns[1].terms) == {"outcome", "format", "tool"}


def test_tiny_hf_policy_end_to_end(tiny_policy: Any) -> None:
    env = gym.make("prm/Math-v0")
    chat = ChatTemplate(tiny_policy.tokenizer)
    trajs = rollout(
        [env, gym.make("prm/Math-v0")],
        tiny_policy,
        chat,
        seeds=[0, 0],
        sampling=SamplingParams(max_new_tokens=12, temperature=1.0),
    )
    for traj in trajs:
        assert traj.turns and (traj.terminated or traj.truncated)
        assert traj.num_generated_tokens <= 12 * len(traj.turns)
        for t in traj.turns:
            assert abs(sum(t.terms.values()) - t.reward) < 1e-6
            assert all(traj.loss_mask[t.start : t.end])
    assert trajs[0].task_id == trajs[1].task_id


def test_behaviour_logprobs_match_a_forward_pass(tiny_policy: Any) -> None:
    chat = ChatTemplate(tiny_policy.tokenizer)
    prompt = chat.prompt_ids("hello", [])
    gen = tiny_policy.generate([prompt, prompt[5:]], SamplingParams(max_new_tokens=10, temperature=0.8))
    for p, g in zip([prompt, prompt[5:]], gen, strict=True):
        ids = torch.tensor([p + g.token_ids])
        with torch.no_grad():
            logits = tiny_policy.model(ids).logits[0, len(p) - 1 : -1].float() / 0.8
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(ref, torch.tensor(g.logprobs), atol=1e-4)


def test_stop_strings_end_a_turn(tiny_tokenizer: Any) -> None:
    from prm_gym.agents.hf import HFPolicy

    class Parrot(torch.nn.Module):
        """Always emits the bytes of a fixed string: a deterministic model for stop tests."""

        def __init__(self, target: list[int], vocab: int):
            super().__init__()
            self.target, self.vocab, self.w = target, vocab, torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids: torch.Tensor, past_key_values: Any = None, **kw: Any) -> Any:
            step = 0 if past_key_values is None else past_key_values + 1
            logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab), -1e9)
            logits[:, -1, self.target[min(step, len(self.target) - 1)]] = 0.0
            return type("Out", (), {"logits": logits, "past_key_values": step})()

    target = tiny_tokenizer.encode("<answer>7</answer> trailing text", add_special_tokens=False)
    policy = HFPolicy(Parrot(target, len(tiny_tokenizer)), tiny_tokenizer)
    [g] = policy.generate([[5, 6]], SamplingParams(max_new_tokens=50, temperature=1.0))
    assert g.text == "<answer>7</answer>" and g.finish_reason == "stop"
    [g] = policy.generate([[5, 6]], SamplingParams(max_new_tokens=4, temperature=1.0))
    assert g.finish_reason == "length" and len(g.token_ids) == 4


def test_policy_ids_are_validated() -> None:
    from prm_gym.core.errors import ConfigError
    from prm_gym.core.models import load_hf

    with pytest.raises(ConfigError, match="must start with 'hf:'"):
        load_hf("smollm2")
    with pytest.raises(ConfigError, match="not a directory"):
        load_hf("hf:/no/such/dir")


@pytest.mark.slow
def test_smollm2_episode() -> None:
    from prm_gym.agents.hf import HFPolicy

    policy = HFPolicy.from_id("hf:smollm2-135m")
    traj = run_episode(
        gym.make("prm/Math-v0"),
        policy,
        ChatTemplate(policy.tokenizer),
        seed=0,
        sampling=SamplingParams(max_new_tokens=48),
    )
    assert traj.turns and traj.num_generated_tokens > 0
