"""Shared fixtures: the tiny in-process model and tokenizer (loaded once per session)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Any:
    from prm_gym.core.models import tiny_tokenizer as make

    return make()


@pytest.fixture(scope="session")
def tiny_policy() -> Any:
    from prm_gym.core.hf import HFPolicy

    return HFPolicy.from_id("hf:tiny", seed=0)
