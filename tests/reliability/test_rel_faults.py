"""Injected infrastructure faults: every affected turn is flagged ``infra_error``, none is scored.

Faults are injected at a set rate with a seeded RNG into real components (the in-process fake
OpenAI server, a real retrieval server, real bubblewrap sandboxes killed with SIGKILL) and the
number of flagged turns is compared with the number injected.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import numpy as np
import pytest

from prm_gym.envs.math.env import MathEnv
from prm_gym.rewards.openai_fake import FakeOpenAIServer

RATE = 0.3
GOOD = '{"score": 7, "reason": "fine"}'


UNUSABLE = ("garbage", "nan", "inf", "out_of_range")
"""Replies the judge model sent whose verdict cannot be read: scored the minimum (the text it read was the agent's)."""


class ScriptedJudgeServer:
    """A fake judge endpoint whose next reply is chosen per turn: fine, or one kind of fault."""

    KINDS = ("http500", "drop", "garbage", "nan", "inf", "out_of_range", "timeout")

    def __init__(self, timeout_s: float) -> None:
        self.next_reply = GOOD
        self.server = FakeOpenAIServer(reply=lambda messages: self.next_reply).start()
        self.timeout_s = timeout_s

    def arm(self, kind: str | None) -> None:
        """Make the next request fail with ``kind`` (None: answer normally, slowly for 'slow')."""
        self.next_reply, self.server.delay_s = GOOD, 0.0
        if kind == "http500":
            self.server.fail_next(1, 500)
        elif kind == "drop":
            self.server.fail_next(1, 0)
        elif kind == "garbage":
            self.next_reply = "Score: ten out of ten!!"
        elif kind == "nan":
            self.next_reply = '{"score": NaN, "reason": "x"}'
        elif kind == "inf":
            self.next_reply = '{"score": Infinity, "reason": "x"}'
        elif kind == "out_of_range":
            self.next_reply = '{"score": 11, "reason": "x"}'
        elif kind == "timeout":
            self.server.delay_s = self.timeout_s * 3
        elif kind == "slow":  # slow but inside the timeout: must be scored normally
            self.server.delay_s = self.timeout_s / 4


def _judge_env(base_url: str, timeout_s: float) -> MathEnv:
    return MathEnv(
        num_tasks=20,
        judge="rule/math_equiv + llm/turn",
        judge_kwargs={"llm/turn": {"base_url": base_url, "timeout_s": timeout_s, "max_retries": 0, "cache_size": 0}},
        max_turns=200,
    )


def test_judge_faults_are_flagged_one_for_one() -> None:
    timeout_s = 0.4
    judge = ScriptedJudgeServer(timeout_s)
    env = _judge_env(judge.server.base_url, timeout_s)
    rng = np.random.default_rng(11)
    injected: dict[str, int] = {}
    unusable: dict[str, int] = {}
    flagged = slow_ok = 0
    try:
        env.reset(seed=0)
        for i in range(60):
            kind = str(rng.choice(ScriptedJudgeServer.KINDS)) if rng.random() < RATE else None
            kind = kind or ("slow" if i % 10 == 0 else None)
            judge.arm(kind)
            action = (
                f'Step {i}: <tool_call>{{"name": "calculator", "arguments": {{"expression": "{i} + 1"}}}}</tool_call>'
            )
            _, reward, _, _, info = env.step(action)
            if kind in UNUSABLE:  # the service answered: an unusable verdict is the minimum, never infra
                unusable[kind] = unusable.get(kind, 0) + 1
                assert info["reward_status"] == "ok", (kind, info)
                assert info["reward_process"] == 0.0
            elif kind not in (None, "slow"):
                injected[kind] = injected.get(kind, 0) + 1
                assert info["reward_status"] == "infra_error", (kind, info)
                assert "error" in info["judge"]["llm/turn"]
                assert info["reward_process"] == 0.0  # not scored as the agent's failure
            else:
                assert info["reward_status"] == "ok", (kind, info["judge"])
                assert info["reward_process"] == pytest.approx(0.7)
                slow_ok += kind == "slow"
            flagged += info["reward_status"] == "infra_error"
            assert np.isfinite(reward)
    finally:
        judge_usage = next(j for _, j in env.judges if j.name == "llm/turn").usage
        env.close()
        judge.server.close()
    assert sum(injected.values()) >= 5 and len(injected) >= 2 and len(unusable) >= 2
    assert flagged == sum(injected.values())
    assert judge_usage.unusable == sum(unusable.values())  # each counted by the judge, none raised
    assert slow_ok >= 3
    print(
        f"\njudge faults: 60 turns, service faults {sum(injected.values())} {injected}, flagged {flagged}; "
        f"unusable verdicts {sum(unusable.values())} {unusable}, scored 0; slow ok {slow_ok}"
    )


def test_retrieval_server_down_mid_run_is_infra_not_agent_error() -> None:
    from prm_gym.envs.search.env import SearchEnv, world_index
    from prm_gym.envs.search.index.server import RetrievalServer

    index = world_index(40, 0)
    server = RetrievalServer(index, port=0).start()
    port = server.server_address[1]
    env = SearchEnv(
        index=server.url,
        world_people=40,
        num_tasks=10,
        retrieval_timeout_s=2.0,
        max_turns=100,
        judge="rule/format + rule/tool",
    )
    rng = np.random.default_rng(5)
    injected = flagged = 0
    up = True
    try:
        env.reset(seed=0)
        for i in range(24):
            want_down = rng.random() < RATE
            if want_down and up:
                server.stop()
                up = False
            elif not want_down and not up:
                server = RetrievalServer(index, port=port).start()
                up = True
            action = f'<tool_call>{{"name": "search", "arguments": {{"query": "person {i} born"}}}}</tool_call>'
            _, _, _, _, info = env.step(action)
            injected += not up
            flagged += info["reward_status"] == "infra_error"
            assert info["reward_status"] == ("ok" if up else "infra_error"), info
            assert info["reward_tool"] == 0.0 or up  # a dead retriever is not the agent's failed call
    finally:
        env.close()
        server.stop()
    assert injected >= 3 and flagged == injected
    print(f"\nretrieval down: 24 turns, injected {injected}, flagged {flagged}")


def _bwrap_killer_sandbox(plan: list[bool]) -> Any:
    from prm_gym.sandbox.bwrap import BwrapSandbox
    from prm_gym.sandbox.types import Limits

    class KillerSandbox(BwrapSandbox):
        """A real bwrap sandbox whose worker is SIGKILLed by the host mid-run when ``plan`` says so."""

        def acquire(self) -> Any:
            worker = super().acquire()
            if plan.pop(0):
                threading.Timer(0.3, os.killpg, (worker.proc.pid, signal.SIGKILL)).start()
            return worker

    return KillerSandbox(limits=Limits(timeout_s=5))


def test_sandbox_backend_killed_is_flagged() -> None:
    from prm_gym.envs.code.env import CodeEnv

    rng = np.random.default_rng(3)
    plan = [bool(rng.random() < 0.4) for _ in range(8)]
    plan[0], plan[1] = True, False
    expected = list(plan)
    box = _bwrap_killer_sandbox(plan)
    env = CodeEnv(num_tasks=5, sandbox=box, judge="rule/format + rule/tool", max_turns=50)
    flagged = []
    try:
        env.reset(seed=0)
        for i in range(len(expected)):
            code = f"import time\\ntime.sleep(0.8)\\nprint({i})"
            _, _, _, _, info = env.step(
                f'<tool_call>{{"name": "python", "arguments": {{"code": "{code}"}}}}</tool_call>'
            )
            flagged.append(info["reward_status"] == "infra_error")
            if expected[i]:
                assert info["reward_tool"] == 0.0 and not info["tool"]["ok"]
    finally:
        env.close()
        box.close()
    assert flagged == expected
    print(f"\nsandbox killed: {len(expected)} turns, injected {sum(expected)}, flagged {sum(flagged)}")
