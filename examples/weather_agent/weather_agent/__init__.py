"""A worked example of bringing your own tool to prm-gym.

Importing this package registers ``weather/Forecast-v0``: the agent looks up forecasts for
fictional towns (so no model can know them), converts units, and answers a numeric question.
Its outcome judge ``weather/close`` comes from this package's ``prm_gym.judges`` entry point.
"""

from prm_gym.envs import register_tool_env
from weather_agent.tasks import generate_tasks
from weather_agent.tools import convert_temperature, get_forecast

register_tool_env(
    "weather/Forecast-v0",
    tools=[get_forecast, convert_temperature],
    tasks=generate_tasks,
    judge="weather/close + 0.1*rule/format + 0.1*rule/tool",
    max_turns=4,
    overwrite=True,
)
