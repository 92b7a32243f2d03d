"""A missing optional dependency says, in one line, which extra to install (never a raw
``ModuleNotFoundError`` traceback). Each case runs in a fresh interpreter where the module is made
unimportable (``sys.modules[name] = None``, which makes ``import name`` raise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVE = "from prm_gym.envs.serve.cli import main; raise SystemExit(main(['--env', 'prm/Math-v0']))"


def _run(missing: str, code: str) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys; sys.modules[{missing!r}] = None\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )


@pytest.mark.parametrize(
    ("missing", "code", "extra"),
    [
        ("tyro", "from prm_gym.training.cli import main; raise SystemExit(main(['--steps', '1']))", "train"),
        (
            "fastapi",
            "from prm_gym.envs.serve.cli import main; raise SystemExit(main(['--env', 'prm/Math-v0']))",
            "serve",
        ),
        (
            "uvicorn",
            "from prm_gym.envs.serve.cli import main; raise SystemExit(main(['--env', 'prm/Math-v0']))",
            "serve",
        ),
        ("docker", "from prm_gym.sandbox.docker_image import main; raise SystemExit(main([]))", "docker"),
        ("sqlglot", "from prm_gym.agents.play import main; raise SystemExit(main(['--env', 'prm/SQL-v0']))", "sql"),
    ],
)
def test_a_command_says_which_extra_to_install_in_one_line(missing: str, code: str, extra: str) -> None:
    proc = _run(missing, code)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert f"{missing} is not installed; pip install 'prm-gym[{extra}]'" in lines[0]


@pytest.mark.parametrize(
    ("missing", "code", "extra"),
    [
        ("sqlglot", "import gymnasium as gym, prm_gym; gym.make('prm/SQL-v0')", "sql"),
        ("sqlglot", "import prm_gym.envs.sql.shape", "sql"),
        ("fastapi", "import prm_gym.envs.serve.app", "serve"),
        ("docker", "from prm_gym.sandbox.docker import docker_client; docker_client()", "docker"),
        ("peft", "from prm_gym.training.lora import _peft; _peft()", "lora"),
    ],
)
def test_the_library_raises_missing_extra_error_naming_the_extra(missing: str, code: str, extra: str) -> None:
    """In library use the last line of the traceback is the advice, and the error is both a
    ``PRMError`` and a ``ModuleNotFoundError`` (code that falls back on an absent module still does)."""
    check = (
        "\nfrom prm_gym.core.errors import MissingExtraError, PRMError\n"
        f"try:\n    exec({code!r})\nexcept MissingExtraError as e:\n"
        "    assert isinstance(e, PRMError) and isinstance(e, ModuleNotFoundError)\n"
        "    print(e)\nelse:\n    raise SystemExit('no MissingExtraError')\n"
    )
    proc = _run(missing, check)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{missing} is not installed; pip install 'prm-gym[{extra}]'" in proc.stdout


def test_the_sessions_module_imports_without_fastapi() -> None:
    """The env server's sessions (and the ``prm-serve`` parser) need no FastAPI until it serves."""
    proc = _run("fastapi", "import prm_gym.envs.serve.sessions, prm_gym.envs.serve.cli")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_no_docker_daemon_is_one_line_from_the_commands(tmp_path: Path) -> None:
    """``sandbox="docker"`` with no daemon answering: prm-play and the image builder print the advice, no traceback."""
    pytest.importorskip("docker", reason="the docker SDK is not installed (pip install 'prm-gym[docker]')")
    sock = f"unix://{tmp_path}/docker.sock"  # nothing listens there
    kwargs = json.dumps({"sandbox": "docker", "sandbox_kwargs": {"base_url": sock}})
    argv = ["--env", "prm/Code-v0", "--env-kwargs", kwargs, "--policy", "gold"]
    play = f"from prm_gym.agents.play import main; raise SystemExit(main({argv!r}))"
    build = f"from prm_gym.sandbox.docker_image import main; raise SystemExit(main(['--base-url', {sock!r}]))"
    for code in (play, build):
        proc = _run("no_such_module_for_this_test", code)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"no Docker daemon answered at {sock}" in lines[0] and "sandbox='bwrap'" in lines[0]
