"""Every outside call has one total deadline: a server that dribbles a byte every half second
cannot hold an LLM judge or an HTTP retriever past its ``timeout_s`` (a per-read timeout would
restart with every byte: 61.6 s and more than 120 s before)."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gymnasium as gym
import pytest

import prm_gym  # noqa: F401  (registers prm/ ids)
from prm_gym.core.errors import JudgeError, RetrievalError
from prm_gym.core.parsing import parse_action
from prm_gym.core.tasks import Task
from prm_gym.envs.search.index.client import HTTPRetriever
from prm_gym.rewards.llm_judge import LLMJudge
from prm_gym.rewards.protocol import score_batch
from prm_gym.rewards.types import Turn

#: The dribbler gives up after this long, so the old per-read timeouts end the test too (late).
DRIBBLE_FOR_S = 20.0


class _Dribbler(BaseHTTPRequestHandler):
    stop: threading.Event

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        end = time.monotonic() + DRIBBLE_FOR_S
        try:
            while time.monotonic() < end and not self.stop.is_set():
                self.wfile.write(b" ")
                self.wfile.flush()
                self.stop.wait(0.5)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dribbler() -> Iterator[str]:
    stop = threading.Event()
    handler = type("Handler", (_Dribbler,), {"stop": stop})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    stop.set()
    server.shutdown()
    server.server_close()


def _turn() -> Turn:
    action = 'I will multiply 6 by 7. <tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    return Turn(Task("t", "What is 6 times 7?", "42"), 0, action, parse_action(action), (), (), False)


def test_llm_judge_deadline_covers_reads_and_retries(dribbler: str) -> None:
    judge = LLMJudge(base_url=dribbler + "/v1", timeout_s=2.0, max_retries=2, backoff_s=0.1)
    start = time.monotonic()
    with pytest.raises(JudgeError, match="deadline"):
        score_batch(judge, [_turn()])
    elapsed = time.monotonic() - start
    print(f"\nllm judge vs a 1 byte/0.5 s server: gave up after {elapsed:.2f}s (timeout_s=2, max_retries=2)")
    assert elapsed < 3.5
    assert judge.usage.requests >= 1 and judge.usage.errors == 1


def test_vllm_policy_deadline_covers_the_whole_answer(dribbler: str) -> None:
    """It was per read: a server dribbling its answer held a request for as long as it liked."""
    from prm_gym.agents.vllm import PolicyServerError, VLLMPolicy
    from prm_gym.core.models import tiny_tokenizer
    from prm_gym.core.policy import SamplingParams

    policy = VLLMPolicy(dribbler + "/v1", tiny_tokenizer(), timeout_s=2.0)
    start = time.monotonic()
    with pytest.raises(PolicyServerError, match="within 2s"):
        policy.generate([[5]], SamplingParams(max_new_tokens=4))
    elapsed = time.monotonic() - start
    print(f"\nvllm policy vs a 1 byte/0.5 s server: gave up after {elapsed:.2f}s (timeout_s=2)")
    assert elapsed < 3.5


@pytest.fixture
def tls_dribbler(dribbler: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The dribbler behind TLS (a self-signed certificate for 127.0.0.1, trusted through
    ``SSL_CERT_FILE``): a TLS socket reads through its own buffers, so the plain-socket deadline
    cannot bound it."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    stop = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Dribbler,), {"stop": stop}))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    stop.set()
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_http_retriever_deadline_covers_the_whole_answer(scheme: str, request: pytest.FixtureRequest) -> None:
    """Over TLS too: its reads go through the TLS socket's own buffers (bounded per read before: 20 s)."""
    if scheme == "https" and shutil.which("openssl") is None:
        pytest.skip("needs the openssl command for a test certificate")
    server = request.getfixturevalue("dribbler" if scheme == "http" else "tls_dribbler")
    retriever = HTTPRetriever(server, timeout_s=2.0)
    start = time.monotonic()
    with pytest.raises(RetrievalError, match="deadline"):
        retriever.search("who wrote it?")
    elapsed = time.monotonic() - start
    print(f"\n{scheme} retriever vs a 1 byte/0.5 s server: gave up after {elapsed:.2f}s (timeout_s=2)")
    assert elapsed < 3.5
    retriever.close()


def test_defaults_keep_a_step_moving() -> None:
    from prm_gym.envs.search.index.client import DEFAULT_TIMEOUT_S as RETRIEVER_S
    from prm_gym.rewards.llm_judge import DEFAULT_TIMEOUT_S as JUDGE_S

    assert LLMJudge().timeout_s == JUDGE_S == 30.0
    assert HTTPRetriever("http://127.0.0.1:9").timeout_s == RETRIEVER_S == 2.0


@pytest.fixture
def silent_retriever() -> Iterator[str]:
    """A retrieval "server" that accepts every connection and never sends a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    listener.close()


def test_a_search_step_against_a_silent_retriever_is_an_infra_error_in_2s(silent_retriever: str) -> None:
    env = gym.make("prm/Search-v0", index=silent_retriever, world_people=40, num_tasks=4)  # default deadline
    env.reset(seed=0)
    call = '<tool_call>{"name": "search", "arguments": {"query": "river city"}}</tool_call>'
    start = time.monotonic()
    _, reward, _, _, info = env.step(call)
    elapsed = time.monotonic() - start
    env.close()
    print(f"\nsearch step vs a retriever that never answers: infra_error after {elapsed:.2f}s (default deadline)")
    assert info["reward_status"] == "infra_error"
    assert 1.9 < elapsed < 3.0  # the 2 s default (it was 10 s)
