"""Policies and the episode loop: chat rendering, token ids, loss masks, trajectories."""

from agents.chat import ChatTemplate
from agents.policy import FakePolicy, Generation, Policy, SamplingParams
from agents.rollout import Trajectory, TurnRecord, rollout, run_episode

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
