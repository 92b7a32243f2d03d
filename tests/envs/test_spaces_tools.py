"""UnicodeText and tool schemas from Python functions."""

from __future__ import annotations

from typing import Literal

import pytest
from gymnasium.spaces import Text

from prm_gym.core.errors import ConfigError
from prm_gym.core.spaces import UnicodeText
from prm_gym.core.tools import Tool, function_schema


def test_unicode_text_admits_real_llm_output() -> None:
    text = 'Let\'s see 🤔\n<tool_call>{"name": "é"}</tool_call>\t中文'
    assert not Text(1000).contains(text)
    space = UnicodeText(100)
    assert space.contains(text) and not space.contains("x" * 101) and not space.contains(b"bytes")
    space.seed(0)
    a = [space.sample() for _ in range(5)]
    space.seed(0)
    assert a == [space.sample() for _ in range(5)]
    assert all(space.contains(s) for s in a)
    with pytest.raises(ValueError):
        UnicodeText(0)


def forecast(city: str, days: int = 3, unit: Literal["C", "F"] = "C", tags: list[str] | None = None) -> str:
    """Get the weather forecast.

    Args:
        city: the city name.
        days: how many days ahead.
    """
    return city


def test_function_schema() -> None:
    s = function_schema(forecast)["function"]
    assert s["name"] == "forecast" and s["description"] == "Get the weather forecast."
    props = s["parameters"]["properties"]
    assert props["city"] == {"type": "string", "description": "the city name."}
    assert props["days"]["type"] == "integer" and props["unit"]["enum"] == ["C", "F"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert s["parameters"]["required"] == ["city"]
    tool = Tool.from_function(forecast)
    assert tool.check_arguments({"city": "Oslo"}) is None
    assert "missing" in (tool.check_arguments({}) or "")
    assert "must be a number" in (tool.check_arguments({"city": "x", "days": "2"}) or "")


def test_schema_errors() -> None:
    def no_hints(x):  # type: ignore[no-untyped-def]
        return x

    def bad_type(x: complex) -> str:
        return ""

    with pytest.raises(ConfigError, match="no type hint"):
        function_schema(no_hints)
    with pytest.raises(ConfigError, match="cannot be expressed"):
        function_schema(bad_type)
