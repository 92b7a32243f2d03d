"""``--policy`` is parsed once (prm_gym.core.policy_spec); no other module reads an id's prefix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.core.policy_spec import KINDS, PolicySpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("text", "kind", "target"),
    [
        ("hf:tiny", "hf", "tiny"),
        ("hf:/models/run:3", "hf", "/models/run:3"),
        ("vllm:http://a:8000/v1,http://b:8000/v1", "vllm", "http://a:8000/v1,http://b:8000/v1"),
        ("vllm-engine:/w", "vllm-engine", "/w"),
        ("openai:gpt@http://h/v1", "openai", "gpt@http://h/v1"),
    ],
)
def test_ids_parse_into_kind_and_target_and_back(text: str, kind: str, target: str) -> None:
    spec = PolicySpec.parse(text)
    assert (spec.kind, spec.target, str(spec)) == (kind, target, text)


@pytest.mark.parametrize("text", ["", "hf:", "hf:  ", "tiny", "HF:tiny", "vllm", "ollama:llama3", ":x"])
def test_malformed_ids_are_config_errors_that_list_the_kinds(text: str) -> None:
    with pytest.raises(ConfigError, match="vllm-engine:<model dir>"):
        PolicySpec.parse(text)


def test_vllm_urls_and_trainability() -> None:
    assert PolicySpec.parse("vllm:http://a/v1,,http://b/v1").urls == ["http://a/v1", "http://b/v1"]
    assert [k for k, v in KINDS.items() if not v.trainable] == ["openai"]


def test_hf_ids_load_through_their_kind() -> None:
    policy = PolicySpec.parse("hf:tiny").load(seed=3)
    assert type(policy).__name__ == "HFPolicy" and policy.model is not None


def test_no_module_outside_the_kinds_reads_a_policy_prefix() -> None:
    """A new sampler kind is a line in KINDS and its class, not an edit of every module that once
    compared strings: no ``startswith("hf:" | "vllm:" | ...)`` nor slicing off a prefix remains."""
    prefix = r"""(["'])(hf|vllm|vllm-engine|openai):\1"""
    pattern = re.compile(rf"startswith\(\(?{prefix}|removeprefix\({prefix}|\[(3|5|12):\]")
    owners = {"core/policy_spec.py", "agents/openai_policy.py", "agents/vllm_engine.py"}
    found = []
    for path in (ROOT / "prm_gym").rglob("*.py"):
        rel = str(path.relative_to(ROOT / "prm_gym"))
        if rel in owners:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and ("policy" in line or "weights" in line or "hf:" in line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, found
