"""Trajectories exported to jsonl and parquet, loaded back with ``datasets``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from datasets import load_dataset

from prm_gym.agents.chat import ChatTemplate
from prm_gym.agents.export import export_trajectories
from prm_gym.agents.rollout import Trajectory, run_episode
from prm_gym.core.parsing import format_tool_call
from prm_gym.core.policy import FakePolicy
from prm_gym.envs import register_tool_env
from prm_gym.rewards.registry import register_judge
from prm_gym.rewards.testing import FakeJudge, failing

ROOT = Path(__file__).resolve().parents[2]


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


register_judge("exporttest/down", lambda: FakeJudge("exporttest/down", failing("judge server down")), overwrite=True)
register_tool_env(
    "exporttest/Multiply-v0",
    tools=[multiply],
    tasks=[{"id": "t0", "prompt": "What is 6 times 7?", "answer": "42"}],
    judge="rule/exact_match + 0.1*rule/format",
    max_turns=3,
    overwrite=True,
)


def _trajectories(tok: Any) -> list[Trajectory]:
    chat = ChatTemplate(tok)
    script = [format_tool_call("multiply", {"a": 6, "b": 7}), "<answer>42</answer>"]
    good = run_episode(gym.make("exporttest/Multiply-v0"), FakePolicy(tok, script), chat, seed=0)
    down_env = gym.make("exporttest/Multiply-v0", judge="rule/exact_match + exporttest/down")
    down = run_episode(down_env, FakePolicy(tok, ["just prose"] * 3), chat, seed=1)
    return [good, down]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_loads_with_datasets(fmt: str, tmp_path: Path, tiny_tokenizer: Any) -> None:
    trajs = _trajectories(tiny_tokenizer)
    path = tmp_path / "out" / f"trajs.{fmt}"
    assert export_trajectories(trajs, path, env_id="exporttest/Multiply-v0", include_tokens=True) == 2
    ds = load_dataset(fmt.replace("jsonl", "json"), data_files=str(path), split="train", cache_dir=str(tmp_path / "c"))
    assert ds.num_rows == 2
    good, down = ds[0], ds[1]
    assert good["env_id"] == "exporttest/Multiply-v0" and good["task_id"] == "t0" and good["terminated"]
    assert good["total_reward"] == pytest.approx(1.0) and not good["infra_error"]
    assert [m["role"] for m in good["messages"]] == ["user", "assistant", "user", "assistant"]
    assert good["messages"][2]["content"] == "<tool_response>\n42\n</tool_response>"
    assert good["messages"][3]["content"] == "<answer>42</answer>"
    assert good["turns"][0]["tool_calls"] == 1 and good["turns"][1]["terms"]["outcome"] == 1.0
    assert good["token_ids"] == trajs[0].token_ids and good["loss_mask"] == trajs[0].loss_mask
    assert down["infra_error"] and down["truncated"] and down["num_turns"] == 3
    assert {t["status"] for t in down["turns"]} == {"infra_error"}
    assert down["turns"][0]["terms"]["format"] is None  # a term of the other env: one schema for all rows
    assert down["turns"][0]["terms"]["process"] == 0.0  # the failed judge adds nothing; the turn is flagged
    judged = {j["id"]: j for j in down["turns"][0]["judges"]}
    assert "judge server down" in judged["exporttest/down"]["error"] and judged["exporttest/down"]["score"] is None


def test_export_filter_and_bad_suffix(tmp_path: Path, tiny_tokenizer: Any) -> None:
    trajs = _trajectories(tiny_tokenizer)
    path = tmp_path / "sft.jsonl"
    assert export_trajectories(trajs, path, keep=lambda t: not t.infra_error and t.total_reward > 0) == 1
    assert "token_ids" not in path.read_text()
    with pytest.raises(ValueError, match=r"\*\.jsonl or \*\.parquet"):
        export_trajectories(trajs, tmp_path / "out.csv")


def test_prm_export_cli_plays_and_writes_parquet(tmp_path: Path) -> None:
    out = tmp_path / "math.parquet"
    cmd = [sys.executable, "-m", "prm_gym.agents.export", "--env", "prm/Math-v0", "--policy", "hf:tiny"]
    cmd += ["--episodes", "2", "--max-new-tokens", "8", "--tokens", "--output", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "wrote 2 trajectories" in done.stdout
    ds = load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "c"))
    assert ds.num_rows == 2 and set(ds["env_id"]) == {"prm/Math-v0"}
    assert all(len(ids) == len(mask) for ids, mask in zip(ds["token_ids"], ds["loss_mask"], strict=True))
    bad = subprocess.run([*cmd[:-1], str(tmp_path / "x.txt")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "*.jsonl or *.parquet" in bad.stderr
