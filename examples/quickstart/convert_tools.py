"""Your own tool env in one file: a tool function, tasks, a judge, ``gym.make``, then training.

Save it as ``convert_tools.py`` in any folder and, from that folder, play one scripted episode::

    python convert_tools.py

check every task's gold answer, then train on it (``--imports`` loads the module, which registers
``mylab/Convert-v0``)::

    prm-play --imports convert_tools --env mylab/Convert-v0 --policy gold
    train-agent --imports convert_tools --env mylab/Convert-v0 --steps 2
"""

from __future__ import annotations

import gymnasium as gym

from prm_gym.envs import register_tool_env


def to_celsius(fahrenheit: float) -> float:
    """Convert a temperature from Fahrenheit to Celsius.

    Args:
        fahrenheit: the temperature in degrees Fahrenheit.
    """
    return round((fahrenheit - 32) * 5 / 9, 1)


def tasks(split: str = "train") -> list[dict[str, str]]:
    """The tasks of a split: every fourth temperature is held out for evaluation (``split="test"``)."""
    held_out = split == "test"
    return [
        {"id": f"f{f}", "question": f"What is {f} degrees Fahrenheit in Celsius?", "answer": str(to_celsius(f))}
        for f in range(0, 212, 4)
        if (f % 16 == 0) == held_out
    ]


if "mylab/Convert-v0" not in gym.registry:
    register_tool_env(
        "mylab/Convert-v0",
        tools=[to_celsius],
        tasks=tasks,  # called with split=; held-out eval asks for split='test'
        judge="rule/math_equiv + 0.1*rule/format",  # outcome: the answer's value; a small format term
        max_turns=3,
    )

if __name__ == "__main__":
    env = gym.make("mylab/Convert-v0")
    obs, info = env.reset(seed=0, options={"task_id": "f100"})
    print(obs.splitlines()[0])
    call = '<tool_call>{"name": "to_celsius", "arguments": {"fahrenheit": 100}}</tool_call>'
    for action in (call, "<answer>37.8</answer>"):
        obs, reward, terminated, truncated, info = env.step(action)
        terms = {k: v for k, v in info.items() if k.startswith("reward_") and k != "reward_status"}
        print(f"{action}\n  -> {obs.strip()[:80]!r}\n  reward {reward:+.2f} {terms} [{info['reward_status']}]")
    env.close()
