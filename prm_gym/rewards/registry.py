"""Judges by string id.

Built-in ids are listed in :data:`BUILTIN_JUDGES` and imported lazily. Third-party packages add
their own through the ``prm_gym.judges`` entry-point group (``my-id = "mypkg.judges:factory"``) or by
calling :func:`register_judge` at import time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.rewards.protocol import AsyncJudge, Judge

JudgeFactory = Callable[..., Judge | AsyncJudge]

#: id -> "module:attribute" of the factory (a class or a function returning a judge).
BUILTIN_JUDGES: dict[str, str] = {
    "rule/math_equiv": "prm_gym.rewards.rule:MathEquivJudge",
    "rule/exact_match": "prm_gym.rewards.rule:ExactMatchJudge",
    "rule/f1": "prm_gym.rewards.rule:F1Judge",
    "rule/format": "prm_gym.rewards.rule:FormatJudge",
    "rule/tool": "prm_gym.rewards.rule:ToolErrorJudge",
    "rule/retrieval": "prm_gym.rewards.retrieval:RetrievalJudge",
    "rule/unit_tests": "prm_gym.rewards.unit_tests:UnitTestsJudge",
    "rule/unit_tests_all": "prm_gym.rewards.unit_tests:unit_tests_all",
    "rule/execution_match": "prm_gym.envs.sql.judges:ExecutionMatchJudge",
    "rule/sql_syntax": "prm_gym.envs.sql.judges:SyntaxJudge",
    "rule/sql_schema_link": "prm_gym.envs.sql.judges:SchemaLinkJudge",
    "rule/sql_result_overlap": "prm_gym.envs.sql.judges:ResultOverlapJudge",
    "rule/sql_explore": "prm_gym.envs.sql.judges:ExploreJudge",
    "llm/turn": "prm_gym.rewards.llm_judge:turn_judge",
    "llm/trajectory": "prm_gym.rewards.llm_judge:trajectory_judge",
    "prm/discriminative": "prm_gym.rewards.prm:DiscriminativePRM",
    "prm/implicit": "prm_gym.rewards.implicit:ImplicitPRM",
    "prm/prime": "prm_gym.rewards.prime:OnlineImplicitPRM",
    "progress/info_gain": "prm_gym.rewards.info_gain:InfoGainJudge",
    "progress/mc": "prm_gym.rewards.progress:MonteCarloProgressJudge",
    "tool/format": "prm_gym.rewards.tool_use:ToolFormatJudge",
    "tool/name": "prm_gym.rewards.tool_use:ToolNameJudge",
    "tool/params": "prm_gym.rewards.tool_use:ToolParamsJudge",
    "tool/values": "prm_gym.rewards.tool_use:ToolValuesJudge",
    "tool/efficiency": "prm_gym.rewards.tool_use:ToolEfficiencyJudge",
}

_registry: dict[str, JudgeFactory] = {}
_entry_points_loaded = False


def register_judge(judge_id: str, factory: JudgeFactory, *, overwrite: bool = False) -> None:
    """Make ``judge_id`` resolvable by :func:`make_judge`.

    Raises:
        ConfigError: the id is malformed or already registered (pass ``overwrite=True``).
    """
    if "/" not in judge_id or judge_id.strip() != judge_id or " " in judge_id:
        raise ConfigError(f"Judge id {judge_id!r} must look like 'family/name' with no spaces.")
    if not overwrite and (judge_id in _registry or judge_id in BUILTIN_JUDGES):
        raise ConfigError(f"Judge id {judge_id!r} is already registered; pass overwrite=True to replace it.")
    _registry[judge_id] = factory


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group="prm_gym.judges"):
        if ep.name not in _registry:
            _registry[ep.name] = ep.load()


def _resolve(judge_id: str) -> JudgeFactory:
    if judge_id in _registry:
        return _registry[judge_id]
    if judge_id in BUILTIN_JUDGES:
        module, attr = BUILTIN_JUDGES[judge_id].split(":")
        factory: JudgeFactory = getattr(importlib.import_module(module), attr)
        _registry[judge_id] = factory
        return factory
    _load_entry_points()
    if judge_id in _registry:
        return _registry[judge_id]
    raise ConfigError(
        f"Unknown judge id {judge_id!r}. Known ids: {', '.join(available_judges())}. "
        "Third-party judges register through the 'prm_gym.judges' entry-point group."
    )


def available_judges() -> list[str]:
    _load_entry_points()
    return sorted(set(BUILTIN_JUDGES) | set(_registry))


def make_judge(judge_id: str, **kwargs: Any) -> Judge | AsyncJudge:
    """Build the judge registered under ``judge_id``; the instance's ``name`` is the id."""
    judge = _resolve(judge_id)(**kwargs)
    if not isinstance(judge, Judge | AsyncJudge):
        raise ConfigError(f"Factory of {judge_id!r} returned {type(judge).__name__}, not a Judge.")
    return judge
