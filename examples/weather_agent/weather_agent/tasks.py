"""Generated questions whose answers need the forecast tool."""

from __future__ import annotations

from prm_gym.core.tasks import Task
from weather_agent.tools import TOWNS, forecast_high_c


def generate_tasks(n: int = 200, seed: int = 0, split: str = "train") -> list[Task]:
    """``n`` questions; the ``test`` split uses other town/day pairs' order (a different seed)."""
    seed = seed + (0 if split == "train" else 1000)
    tasks = []
    for k in range(n):
        city, day = TOWNS[(k * 7 + seed) % len(TOWNS)], (k * 3 + seed) % 7
        high = forecast_high_c(city, day)
        if k % 2:
            prompt = f"What is the forecast high temperature in {city} in {day} days, in degrees Fahrenheit?"
            answer = f"{high * 9 / 5 + 32:g}"
        else:
            prompt = f"What is the forecast high temperature in {city} in {day} days, in degrees Celsius?"
            answer = str(high)
        tasks.append(Task(f"weather-{split}-{seed}-{k:04d}", prompt, answer, {"city": city, "day": day}))
    return tasks
