"""The built wheel installs one top-level name, ``prm_gym``: a user's own ``envs/`` and
``training/`` folders neither shadow ours nor are shadowed by them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHECK = """
import envs, training, prm_gym, gymnasium as gym
from prm_gym.training.config import TrainConfig
from prm_gym.envs import ToolEnv
assert envs.MINE and training.MINE, "the user's own folders"
assert prm_gym.__file__.startswith(PREFIX), prm_gym.__file__
env = gym.make("prm_gym:prm/Math-v0")
obs, info = env.reset(seed=0)
assert isinstance(env.unwrapped, ToolEnv) and info["task_id"]
print("ok", TrainConfig().env)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the tracked files (a build writes build/ and *.egg-info into
    its source tree; a copy keeps concurrent builds and the checkout apart)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        origin, copy = ROOT / name, src / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_symlink():
            copy.symlink_to(os.readlink(origin))
        elif origin.is_file():
            shutil.copy2(origin, copy)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return next(out.glob("prm_gym-*.whl"))


def test_wheel_has_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"prm_gym"}
    for module in (
        "prm_gym/envs/base.py",
        "prm_gym/training/cli.py",
        "prm_gym/core/errors.py",
        "prm_gym/sandbox/_boot.py",
    ):
        assert module in names


def test_fresh_venv_beside_users_own_envs_and_training(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True).strip()
    )
    with zipfile.ZipFile(wheel) as zf:  # what pip does with a pure wheel: unpack into purelib
        zf.extractall(site)
    # the dependencies (gymnasium, numpy, ...) come from this interpreter's site-packages, appended
    # after the venv's own, whose .pth files (our editable install's finder) are not processed
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    work = tmp_path / "research"
    for pkg in ("envs", "training"):
        (work / pkg).mkdir(parents=True)
        (work / pkg / "__init__.py").write_text("MINE = True\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what the venv itself finds
    proc = subprocess.run(
        [py, "-c", f"PREFIX = {str(site)!r}\n{CHECK}"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok prm/Math-v0"
