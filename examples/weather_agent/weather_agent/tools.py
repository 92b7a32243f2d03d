"""The tools: a deterministic forecast service for fictional towns, and a unit converter."""

from __future__ import annotations

import hashlib
from typing import Literal

from prm_gym.core.errors import ToolError

TOWNS = ("Brindlemoor", "Quellhaven", "Ostravale", "Marrowick", "Tessadine", "Vorlund", "Kelpford", "Ashcombe")


def forecast_high_c(city: str, day: int) -> int:
    """The (fictional, stable) high temperature in Celsius."""
    digest = hashlib.sha256(f"{city}:{day}".encode()).digest()
    return -5 + digest[0] % 36


def get_forecast(city: str, day: int = 0) -> str:
    """Get the weather forecast for a town.

    Args:
        city: the town's name, e.g. "Brindlemoor".
        day: days from today, 0 to 6.
    """
    if city not in TOWNS:
        raise ToolError(f"unknown town {city!r}; known towns: {', '.join(TOWNS)}")
    if not 0 <= day <= 6:
        raise ToolError("day must be between 0 and 6")
    high = forecast_high_c(city, day)
    rain = (high * 7) % 100
    return f"{city}, day {day}: high {high} C, chance of rain {rain}%"


def convert_temperature(celsius: float, to: Literal["F", "K"] = "F") -> str:
    """Convert a Celsius temperature.

    Args:
        celsius: the temperature in degrees Celsius.
        to: "F" for Fahrenheit or "K" for Kelvin.
    """
    value = celsius * 9 / 5 + 32 if to == "F" else celsius + 273.15
    return f"{value:g} {to}"
