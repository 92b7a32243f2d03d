from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import prm_gym  # noqa: F401  (registers the prm/ ids)
from prm_gym.core.parsing import format_tool_call
from prm_gym.envs.code.env import CodeEnv
from prm_gym.envs.code.gen import generate_code_tasks
from prm_gym.envs.code.tasks import load_code_file, load_humaneval
from prm_gym.rewards.unit_tests import UnitTestsJudge
from prm_gym.sandbox.bwrap import BwrapSandbox
from prm_gym.sandbox.pool import WarmPool

HUMANEVAL = load_humaneval()


def _submit(code: str) -> str:
    return f"<answer>```python\n{code}```</answer>"


@pytest.fixture(scope="module")
def he_env():
    env = CodeEnv(HUMANEVAL, sandbox="bwrap")
    yield env
    env.close()


def _grade(env: CodeEnv, task_id: str, code: str) -> dict:
    env.reset(options={"task_id": task_id})
    _, reward, terminated, _, info = env.step(_submit(code))
    assert terminated and info["reward_status"] == "ok"
    return info


def test_registered_env_checks_and_runs_tools():
    env = gym.make("prm/Code-v0")
    check_env(env.unwrapped)
    env.reset(seed=1)
    _, r, term, trunc, info = env.step(format_tool_call("python", {"code": "print(6*7)"}))
    assert info["tool"]["ok"] and r == 0.0 and not term and not trunc
    _, r, _, _, info = env.step(format_tool_call("python", {"code": "raise KeyError('k')"}))
    assert info["reward_tool"] == pytest.approx(-0.1) and r == pytest.approx(-0.1)
    env.close()
    env.close()


@pytest.mark.parametrize("index", range(0, 164, 17))
def test_humaneval_canonical_pass_and_broken_fail(he_env, index):
    task = HUMANEVAL[index]
    info = _grade(he_env, task.id, task.answer)
    assert info["judge"]["rule/unit_tests"]["score"] == 1.0 and info["reward_outcome"] == pytest.approx(1.0)
    broken = task.meta["prompt_code"] + "    raise NotImplementedError\n"
    info = _grade(he_env, task.id, broken)
    assert info["reward_outcome"] == 0.0


@pytest.mark.slow
def test_all_164_humaneval_canonical_solutions_pass(he_env):
    failed = [t.id for t in HUMANEVAL if _grade(he_env, t.id, t.answer)["reward_outcome"] != pytest.approx(1.0)]
    assert failed == []


def test_20_humaneval_canonical_solutions_pass(he_env):
    subset = list(HUMANEVAL)[3::8]  # 21 tasks spread over the set, HumanEval/32 (find_zero) among them
    failed = [t.id for t in subset if _grade(he_env, t.id, t.answer)["reward_outcome"] != pytest.approx(1.0)]
    assert len(subset) >= 20 and failed == []


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/10", "HumanEval/32", "HumanEval/38", "HumanEval/95"])
def test_bare_completion_grades_the_same_with_or_without_a_fence(he_env, task_id):
    task = HUMANEVAL.get(task_id)
    completion = task.answer[len(task.meta["prompt_code"]) :]
    fenced = _grade(he_env, task_id, completion)
    he_env.reset(options={"task_id": task_id})
    _, _, _, _, bare = he_env.step(f"<answer>{completion}</answer>")
    assert bare["reward_status"] == "ok"
    assert fenced["reward_outcome"] == pytest.approx(1.0) and bare["reward_outcome"] == pytest.approx(1.0)
    wrong = "    return None\n"
    he_env.reset(options={"task_id": task_id})
    _, _, _, _, info = he_env.step(f"<answer>{wrong}</answer>")
    assert info["reward_outcome"] == _grade(he_env, task_id, wrong)["reward_outcome"] == 0.0


def test_the_test_time_limit_defaults_to_humaneval_s_3_s_and_is_a_knob():
    from prm_gym.rewards.unit_tests import UnitTestsJudge

    assert UnitTestsJudge().timeout_s == 3.0
    slow = "import time\ndef add(a, b):\n    time.sleep(4)\n    return a + b\n"
    task = {
        "id": "s",
        "prompt": "add",
        "answer": None,
        "meta": {"entry_point": "add", "cases": ["assert add(1, 2) == 3"]},
    }
    with CodeEnv([task], sandbox="bwrap") as env:
        assert _grade(env, "s", slow)["reward_outcome"] == 0.0
    with CodeEnv([task], sandbox="bwrap", test_timeout_s=8.0) as env:
        assert _grade(env, "s", slow)["reward_outcome"] == pytest.approx(1.0)


def test_partial_credit_and_faked_results_earn_nothing(he_env):
    task = HUMANEVAL.get("HumanEval/0")
    wrong = "def has_close_elements(numbers, threshold):\n    return True\n"
    info = _grade(he_env, task.id, wrong)
    assert 0 < info["judge"]["rule/unit_tests"]["score"] < 1 and info["judge"]["rule/unit_tests_all"]["score"] == 0
    fake = (
        "import os, json\nfor i in range(50):\n"
        "    os.write(1, (json.dumps(['x', i, True, '']) + '\\n').encode())\nraise SystemExit(0)\n"
    )
    info = _grade(he_env, task.id, fake)
    assert info["reward_outcome"] == 0.0


@pytest.mark.parametrize("code", ["-" * 3000 + "1", "1+" * 15000 + "1", "x" + ".a" * 10000, "not " * 3000 + "x"])
def test_a_program_too_deeply_nested_to_parse_is_scored_not_raised(he_env, code):
    # Python's parser raises RecursionError or MemoryError for these (a few KB of text): the agent's
    # unparseable program, which fails the tests, not a judge bug that stops the run.
    info = _grade(he_env, "HumanEval/0", code + "\n")
    assert info["reward_outcome"] == 0.0 and info["judge"]["rule/unit_tests"]["score"] == 0.0


def test_generated_tasks_reference_solutions_pass():
    tasks = generate_code_tasks(12, seed=3)
    assert [t.prompt for t in tasks] == [t.prompt for t in generate_code_tasks(12, seed=3)]
    env = CodeEnv(tasks, sandbox="bwrap")
    for task in list(tasks)[:6]:
        info = _grade(env, task.id, task.answer)
        assert info["reward_outcome"] == pytest.approx(1.0), task.id
    env.close()


def test_mbpp_and_humaneval_jsonl_loader(tmp_path):
    path = tmp_path / "tasks.jsonl"
    recs = [
        {
            "task_id": 7,
            "text": "Add two numbers.",
            "code": "def add(a, b):\n    return a + b\n",
            "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
        },
        {
            "task_id": "he",
            "prompt": "def sq(x):\n",
            "test": "def check(candidate):\n    assert candidate(3) == 9\n",
            "entry_point": "sq",
            "canonical_solution": "    return x * x\n",
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in recs))
    tasks = load_code_file(path)
    env = CodeEnv(path, sandbox="bwrap")
    assert _grade(env, "7", tasks.get("7").answer)["reward_outcome"] == pytest.approx(1.0)
    half = "def add(a, b):\n    return 3\n"
    assert _grade(env, "7", half)["judge"]["rule/unit_tests"]["score"] == 0.5
    assert _grade(env, "he", "    return x * x\n")["reward_outcome"] == pytest.approx(1.0)
    env.close()


def test_sandbox_failure_is_infra_error_not_a_wrong_answer():
    broken = BwrapSandbox(bwrap="/bin/false")
    env = CodeEnv(
        generate_code_tasks(3),
        sandbox=broken,
        judge_kwargs={"rule/unit_tests": {"sandbox": broken}, "rule/unit_tests_all": {"sandbox": broken}},
    )
    env.reset(seed=0)
    _, _, _, _, info = env.step(format_tool_call("python", {"code": "print(1)"}))
    assert info["reward_status"] == "infra_error" and info["reward_tool"] == 0.0
    _, _, term, _, info = env.step(_submit("def f():\n    pass\n"))
    assert term and info["reward_status"] == "infra_error" and "error" in info["judge"]["rule/unit_tests"]
    env.close()


def test_tests_may_use_a_module_only_the_solution_imports():
    task = {
        "id": "m",
        "prompt": "area",
        "answer": None,
        "meta": {"entry_point": "area", "cases": ["assert math.isclose(area(1.0), 3.14159, rel_tol=1e-3)"]},
    }
    with CodeEnv([task], sandbox="bwrap") as env:
        good = "import math\ndef area(r):\n    return math.pi * r * r\n"
        assert _grade(env, "m", good)["reward_outcome"] == pytest.approx(1.0)
        # a program's own top-level `math` is never what the tests call
        fake = "class math:\n    isclose = staticmethod(lambda *a, **k: True)\ndef area(r):\n    return 0.0\n"
        assert _grade(env, "m", fake)["reward_outcome"] == 0.0


def test_the_tool_and_the_judge_run_on_warm_pools_started_with_the_env():
    """By default the python tool and the unit-test judges run on bubblewrap warm pools, whose
    workers start when the env is made (before any step) and stop when it closes."""
    tasks = generate_code_tasks(3, seed=5)
    env = CodeEnv(tasks)
    try:
        judges = [j for _, j in env.judges if isinstance(j, UnitTestsJudge)]
        pools = [env.sandbox] + [j.sandbox for j in judges]
        assert len(judges) == 2 and all(isinstance(p, WarmPool) and p.name == "bwrap-pool" for p in pools)
        assert all(p.wait_ready(30) for p in pools)  # ready before the first step
        task = next(iter(tasks))
        info = _grade(env, task.id, task.answer)
        assert info["reward_outcome"] == pytest.approx(1.0)
    finally:
        env.close()
    assert all(p.ready_count() == 0 for p in pools)
