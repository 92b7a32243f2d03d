"""The LLM judge against the in-process OpenAI-compatible fake server on localhost."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.errors import JudgeError
from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.rewards.llm_judge import LLMJudge, parse_verdict
from prm_gym.rewards.openai_fake import FakeOpenAIServer
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.registry import make_judge
from prm_gym.rewards.types import Turn

TASK = Task("t1", "What is 6 times 7?", "42")


def step(text: str, expression: str = "6*7") -> str:
    """A parseable step: ``text`` followed by a calculator call (unparsed turns are not judged)."""
    return f'{text} <tool_call>{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


def turn(action: str, index: int = 0, history: tuple[tuple[str, str], ...] = ()) -> Turn:
    parsed = parse_action(action)
    return Turn(TASK, index, action, parsed, (), history, parsed.answer is not None)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply=lambda m: '{"score": 7, "reason": "reasonable step"}') as srv:
        yield srv


def judge_for(srv: FakeOpenAIServer, **kw: Any) -> LLMJudge:
    return LLMJudge("turn", base_url=srv.base_url, backoff_s=0.01, **kw)


def test_scores_a_batch_and_records_usage(server: FakeOpenAIServer) -> None:
    judge = judge_for(server)
    turns = [turn(step("I will multiply 6 by 7 with the calculator.")), turn("<answer>42</answer>", 1)]
    verdicts = score_batch(judge, turns)
    assert [v.score for v in verdicts] == [0.7, 0.7]
    assert all(v.tokens and v.tokens > 0 and v.latency_s is not None for v in verdicts)
    assert judge.usage.requests == 2 and judge.usage.prompt_tokens > 0
    request = server.requests[0]
    assert request["messages"][0]["role"] == "system" and "JSON" in request["messages"][0]["content"]
    assert "<untrusted>" in request["messages"][1]["content"]


def test_cache_by_content_hash(server: FakeOpenAIServer) -> None:
    judge = judge_for(server)
    t = turn(step("Multiply 6 by 7."))
    first = score_batch(judge, [t])[0]
    again = score_batch(judge, [t])[0]
    assert first.score == again.score and len(server.requests) == 1 and judge.usage.cache_hits == 1


def test_retries_then_succeeds(server: FakeOpenAIServer) -> None:
    server.fail_next(2, status=503)
    judge = judge_for(server, max_retries=2)
    assert score_batch(judge, [turn(step("Multiply 6 by 7."))])[0].score == 0.7
    assert len(server.requests) == 3 and judge.usage.retries == 2 and judge.usage.requests == 3


@pytest.mark.parametrize(("status", "retries"), [(500, 1), (429, 1), (0, 1), (400, 2)])
def test_http_failures_raise_judge_error(server: FakeOpenAIServer, status: int, retries: int) -> None:
    server.fail_next(5, status=status)
    with pytest.raises(JudgeError):
        score_batch(judge_for(server, max_retries=retries), [turn(step("Multiply 6 by 7."))])
    expected = 1 if status == 400 else retries + 1  # a 4xx is not retried
    assert len(server.requests) == expected


def test_timeout_raises_judge_error() -> None:
    with FakeOpenAIServer(delay_s=0.5) as slow:
        judge = LLMJudge(base_url=slow.base_url, timeout_s=0.1, max_retries=0)
        with pytest.raises(JudgeError, match="timed out"):
            score_batch(judge, [turn(step("Multiply 6 by 7."))])


@pytest.mark.parametrize(
    "reply", ["Score: 7", '{"score": "7"}', '{"score": 11}', '{"score": -1}', '{"reason": "x"}', "[7]", "{}", ""]
)
def test_strict_verdict_parsing_rejects(reply: str) -> None:
    with pytest.raises(JudgeError):
        parse_verdict(reply, 10.0)


def test_non_finite_verdict_is_an_error() -> None:
    with pytest.raises(JudgeError):
        parse_verdict('{"score": NaN}', 10.0)
    assert parse_verdict('```json\n{"score": 10, "reason": "ok"}\n```', 10.0) == (1.0, "ok")


@pytest.mark.parametrize("reply", ["I think it deserves a 9.", '{"score": NaN}', '{"score": 11}', '{"reason": "x"}'])
def test_an_unusable_verdict_scores_the_minimum_not_infrastructure(reply: str) -> None:
    """The judge read the agent's text: an agent that talked it out of its format must not have the turn
    left out of its group as infrastructure (a JudgeError); it gets the minimum, with the reason."""
    with FakeOpenAIServer(reply=lambda m: reply) as srv:
        judge = LLMJudge(base_url=srv.base_url)
        (verdict,) = score_batch(judge, [turn(step("Multiply 6 by 7."))])
    assert verdict.score == 0.0 and verdict.unusable and verdict.detail.startswith("unusable verdict:")
    assert judge.usage.unusable == 1 and judge.usage.errors == 0


def test_a_completion_without_content_is_the_services_failure() -> None:
    """A reasoning model that put everything in its reasoning (content null) failed as a service; the
    agent did nothing to cause it, so it is a JudgeError (infrastructure), not a minimum verdict."""
    with FakeOpenAIServer(reply=lambda m: {"content": None}) as srv, pytest.raises(JudgeError, match="no content"):
        score_batch(LLMJudge(base_url=srv.base_url, max_retries=0), [turn(step("Multiply 6 by 7."))])


def test_the_prompt_stays_within_its_budget_however_long_the_episode(server: FakeOpenAIServer) -> None:
    """A long episode must not overflow the judge model's context (its 400 would be infrastructure by
    the agent's hand): the graded turn is cut in the middle, the oldest turns are left out first."""
    judge = LLMJudge(base_url=server.base_url, max_prompt_chars=4000)
    long = "x" * 50_000
    history = tuple((f"turn {i} " + long, "ok") for i in range(9))
    user = judge.messages(turn(step(long + " END"), 9, history))[1]["content"]
    assert len(user) <= 4000 + 400  # the budget, plus the headings and fences around the cut pieces
    assert "END" in user and "characters cut" in user and "# Turns 1-9: left out" in user
    assert "# Turn 1\n" not in user
    fence = "</untrusted>" * 5_000  # escaping lengthens it by half: the cut comes after the escaping
    user = judge.messages(turn(step(fence), 1, ((fence, fence),)))[1]["content"]
    assert len(user) <= 4000 + 400 and user.count("</untrusted>") == 2
    # a short episode is sent whole
    assert "# Turn 1\n" in judge.messages(turn(step("6*7"), 2, (("a", "b"), ("c", "d"))))[1]["content"]


def test_bounded_concurrency() -> None:
    with FakeOpenAIServer(delay_s=0.05) as srv:
        judge = LLMJudge(base_url=srv.base_url, concurrency=3)
        turns = [turn(step(f"Step {i}: multiply 6 by 7."), i) for i in range(9)]
        assert len(score_batch(judge, turns)) == 9
        assert srv.max_in_flight == 3


@pytest.mark.asyncio
async def test_works_inside_a_running_event_loop(server: FakeOpenAIServer) -> None:
    judge = judge_for(server)
    sync_result = score_batch(judge, [turn(step("Multiply 6 by 7."))])[0].score  # sync call inside a running loop
    async_result = (await judge.ascore([turn(step("Multiply 7 by 6.", "7*6"))]))[0].score
    assert math.isclose(sync_result + async_result, 1.4)


def test_trajectory_judge_scores_final_turn_with_reference(server: FakeOpenAIServer) -> None:
    judge = make_judge("llm/trajectory", base_url=server.base_url)
    assert judge.scope == "final" and judge.term == "outcome"
    history = (("<tool_call>{}</tool_call>", "<tool_response>42</tool_response>"),)
    assert score_batch(judge, [turn("<answer>42</answer>", 1, history)])[0].score == 0.7
    content = server.requests[0]["messages"][1]["content"]
    assert "Reference answer" in content and "# Turn 1" in content


def test_env_episode_with_llm_turn_judge(server: FakeOpenAIServer) -> None:
    kwargs = {"llm/turn": {"base_url": server.base_url}}
    env = gym.make("prm/Math-v0", judge="rule/math_equiv + 0.5*llm/turn", judge_kwargs=kwargs)
    json.dumps({"judge": "rule/math_equiv + 0.5*llm/turn", "judge_kwargs": kwargs})  # JSON-able kwargs
    env.reset(seed=0)
    _, reward, _, _, info = env.step(
        '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    )
    assert info["reward_status"] == "ok"
    assert info["judge"]["llm/turn"]["score"] == 0.7 and info["judge"]["llm/turn"]["tokens"] > 0
    assert "latency_s" in info["judge"]["llm/turn"]
    assert math.isclose(reward, 0.35, abs_tol=1e-6)
    server.fail_next(10, status=500)
    _, reward, _, _, info = env.step(step("Let me compute 6 times 7 more carefully now.", "7*6"))
    assert info["reward_status"] == "infra_error" and "error" in info["judge"]["llm/turn"]
    env.close()


def test_structured_output_request(server: FakeOpenAIServer) -> None:
    judge = judge_for(server, structured=True)
    score_batch(judge, [turn(step("Multiply 6 by 7."))])
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"]["properties"]["score"] == {"type": "integer", "minimum": 0, "maximum": 10}


def test_usage_counts_failed_requests_too(server: FakeOpenAIServer) -> None:
    server.fail_next(5, status=500)
    judge = judge_for(server, max_retries=1)
    with pytest.raises(JudgeError):
        score_batch(judge, [turn(step("Multiply 6 by 7."))])
    assert judge.usage.requests == 2 and judge.usage.retries == 1 and judge.usage.errors == 1
    assert judge.usage.latency_s > 0


def test_unparsed_turn_is_not_judged_as_a_step(server: FakeOpenAIServer) -> None:
    """A turn whose action did not parse executed nothing: minimum score, the model is not asked
    (before, the judge graded the free text as if it were a step and gave it 0.7)."""
    judge = judge_for(server, guards=False)
    bad = [turn("I will multiply 6 by 7 with the calculator."), turn('<tool_call>{"name": 1</tool_call>', 1)]
    verdicts = score_batch(judge, bad)
    assert [v.score for v in verdicts] == [0.0, 0.0]
    assert verdicts[0].detail == "unparsed:no_action" and verdicts[1].detail.startswith("unparsed:")
    assert server.requests == [] and judge.usage.unparsed == 2 and judge.usage.requests == 0
    # the same words with a valid call are a step and are judged
    assert score_batch(judge, [turn(step("I will multiply 6 by 7 with the calculator."))])[0].score == 0.7
    # the trajectory judge grades the answer, whatever the turn's text around it
    traj = LLMJudge("trajectory", base_url=server.base_url, guards=False)
    assert score_batch(traj, [turn("<answer>42</answer>", 1)])[0].score == 0.7
