"""Policies and the episode loop: chat rendering, token ids, loss masks, trajectories."""

from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.rollout import Trajectory, TurnRecord, rollout, run_episode
from prm_gym.core.policy import FakePolicy, Generation, Policy, SamplingParams

__all__ = [
    "ChatTemplate",
    "FakePolicy",
    "Generation",
    "Policy",
    "SamplingParams",
    "Trajectory",
    "TurnRecord",
    "rollout",
    "run_episode",
]
