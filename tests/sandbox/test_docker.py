"""The Docker sandbox for real: a daemon (the machine's, or a private ``dockerd`` the session
starts), an image built offline from this machine's Python, prm/Code-v0's tasks through it, and a
missing daemon or image failing when the env is made.

The daemon tests share the ``docker_daemon`` fixture (tests/conftest.py) and run on one xdist
worker; they are slow (a daemon start, an image import, a container per run). The hostile
programs run through Docker in tests/sandbox/test_hostile.py.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

from prm_gym.core.errors import SandboxError
from prm_gym.core.parsing import format_answer, format_tool_call
from prm_gym.envs.code.gen import generate_code_tasks
from prm_gym.sandbox.protocol import make_sandbox
from prm_gym.sandbox.types import Limits

pytest.importorskip("docker", reason="the docker SDK is not installed (pip install 'prm-gym[docker]')")
pytestmark = pytest.mark.xdist_group("docker")


def test_a_missing_daemon_fails_when_the_code_env_is_made(tmp_path) -> None:
    url = f"unix://{tmp_path}/no-daemon.sock"
    with pytest.raises(SandboxError, match=r"no Docker daemon answered at unix://.*apt-get install docker\.io"):
        gym.make("prm/Code-v0", num_tasks=2, sandbox="docker", sandbox_kwargs={"base_url": url})


@pytest.mark.slow
def test_a_missing_image_fails_when_the_code_env_is_made(docker_daemon) -> None:
    kw = {"base_url": docker_daemon.base_url, "image": "prm-gym-no-such-image:0"}
    with pytest.raises(SandboxError, match=r"no image 'prm-gym-no-such-image:0'.*prm_gym\.sandbox\.docker_image"):
        gym.make("prm/Code-v0", num_tasks=2, sandbox="docker", sandbox_kwargs=kw)


@pytest.mark.slow
def test_code_tasks_run_through_docker(docker_daemon) -> None:
    tasks = generate_code_tasks(3, 0)
    env = gym.make(
        "prm/Code-v0", tasks=tasks, sandbox="docker", sandbox_kwargs=docker_daemon.sandbox_kwargs, timeout_s=30
    )
    assert env.unwrapped.sandbox.name == "docker"
    for task in tasks:
        env.reset(options={"task_id": task.id})
        program = (
            task.answer + "\n" + "\n".join(task.meta["cases"]) + "\nprint('all', len(" + repr(task.meta["cases"]) + "))"
        )
        obs, _, _, _, info = env.step(format_tool_call("python", {"code": program}))
        assert info["tool"]["ok"] and f"all {len(task.meta['cases'])}" in obs, obs
        obs, _, _, _, info = env.step(format_tool_call("python", {"code": "assert 1 == 2"}))
        assert not info["tool"]["ok"] and "AssertionError" in obs and info["reward_status"] == "ok"
        _, _, term, _, info = env.step(format_answer(f"```python\n{task.answer}```"))
        assert term and info["reward_outcome"] == 1.0 and info["reward_status"] == "ok"
    env.close()


@pytest.mark.slow
def test_the_container_runs_as_nobody_without_network_on_a_read_only_root(docker_daemon) -> None:
    code = (
        "import os, socket\n"
        "print('uid', os.getuid())\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('CONNECTED')\n"
        "except OSError: print('no network')\n"
        "try:\n    open('/usr/pwned', 'w'); print('WROTE')\n"
        "except OSError: print('read-only')\n"
        "open('ok.txt', 'w').write('x'); print('work dir writable')\n"
    )
    with make_sandbox("docker", limits=Limits(timeout_s=20), **docker_daemon.sandbox_kwargs) as sb:
        r = sb.run(code)
    assert r.ok and r.stdout.split("\n")[:4] == ["uid 65534", "no network", "read-only", "work dir writable"], r
