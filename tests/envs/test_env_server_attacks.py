"""prm-serve under attack, for real: uvicorn on 127.0.0.1, raw sockets and httpx.

Each test failed on the server before issue #32: no token, sessions open to anyone knowing an
id, unbounded ``num_tasks`` (3,000,000 tasks: >100 s and 2 GB), 500 on deep JSON and huge ints,
no body-read deadline, and env calls in the server's own threads (a hung call froze everything).
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from prm_gym.core.errors import ConfigError
from prm_gym.envs.remote import RemoteEnv, RemoteEnvError
from tests.envs.flaky_env import FlakyEnv  # noqa: F401  (registers test/Flaky-v0)

pytest.importorskip("fastapi", reason="the env server needs the serve extra (fastapi, uvicorn)")

from prm_gym.envs.serve.app import build_app, serve_in_thread
from prm_gym.envs.serve.cli import main, parse_args
from prm_gym.envs.serve.sessions import EnvServer, ServerConfig

pytestmark = pytest.mark.xdist_group("env_server")

TOKEN = "s3cret-token-of-32-characters-xx"


@pytest.fixture(scope="module")
def guarded_server() -> Iterator[tuple[EnvServer, str]]:
    server = EnvServer(ServerConfig("test/Flaky-v0", token=TOKEN, call_timeout_s=2.0, body_timeout_s=1.0))
    with serve_in_thread(server) as url:
        yield server, url


@pytest.fixture(scope="module")
def guarded(guarded_server: tuple[EnvServer, str]) -> str:
    return guarded_server[1]


def _auth(client: str = "a") -> dict[str, str]:
    return {"authorization": f"Bearer {TOKEN}", "x-prm-client": client, "content-type": "application/json"}


def test_a_token_is_required_and_compared(guarded: str) -> None:
    assert httpx.get(guarded + "/health").json()["status"] == "ok"  # health needs no token
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {TOKEN}"}):
        r = httpx.post(guarded + "/sessions", json={}, headers=headers)
        assert r.status_code == 401 and "token" in r.json()["error"]
        assert httpx.get(guarded + "/tools", headers=headers).status_code == 401
    with pytest.raises(RemoteEnvError, match="401"):
        RemoteEnv(guarded, token="not-the-token-at-all")
    env = RemoteEnv(guarded, token=TOKEN)
    assert env.reset(seed=0)[0]
    env.close()


def test_the_token_covers_every_endpoint_but_health(guarded_server: tuple[EnvServer, str]) -> None:
    server, url = guarded_server
    routes = [r for r in build_app(server).routes if getattr(r, "path", "/health") != "/health"]
    paths = {getattr(r, "path", "") for r in routes} | {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
    open_without_token = []
    for path in sorted(paths):
        for method in ("GET", "POST", "DELETE"):
            r = httpx.request(method, url + path.replace("{sid}", "x"), headers={"x-prm-client": "a"})
            if r.status_code < 400:
                open_without_token.append(f"{method} {path}: {r.status_code}")
    assert not open_without_token  # before: GET /openapi.json, /docs, /docs/oauth2-redirect, /redoc answered 200
    assert httpx.get(url + "/openapi.json", headers=_auth()).status_code == 404  # off with a token, for everyone
    assert httpx.get(url + "/tools", headers=_auth()).status_code == 200
    assert httpx.get(url + "/health").status_code == 200


def test_the_client_reads_the_token_from_the_environment(guarded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRM_SERVE_TOKEN", TOKEN)
    env = RemoteEnv(guarded)
    assert env.step  # made a session: the token went with it
    env.reset(seed=0)
    clone = env.fork()  # a fork belongs to the same client
    assert clone.step("<answer>0</answer>")[4]["reward_status"] == "ok"
    clone.close()
    env.close()


def test_refuses_to_serve_beyond_loopback_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRM_SERVE_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="token"):
        parse_args(["--env", "test/Flaky-v0", "--host", "0.0.0.0"])
    assert main(["--env", "test/Flaky-v0", "--host", "0.0.0.0"]) == 2
    with pytest.raises(ConfigError, match="at least 16"):
        parse_args(["--env", "test/Flaky-v0", "--host", "0.0.0.0", "--token", "short"])
    cfg, host, _ = parse_args(["--env", "test/Flaky-v0", "--host", "0.0.0.0", "--token", TOKEN])
    assert cfg.token == TOKEN and host == "0.0.0.0"
    monkeypatch.setenv("PRM_SERVE_TOKEN", TOKEN)
    assert parse_args(["--env", "test/Flaky-v0", "--host", "10.1.2.3"])[0].token == TOKEN
    with (
        pytest.raises(ConfigError, match="token"),
        serve_in_thread(EnvServer(ServerConfig("test/Flaky-v0")), "0.0.0.0"),
    ):
        pass


def test_a_session_answers_only_the_client_that_made_it(guarded: str) -> None:
    sid = httpx.post(guarded + "/sessions", json={}, headers=_auth("alice")).json()["session_id"]
    for path in ("reset", "step", "tasks", "fork"):
        method = "GET" if path == "tasks" else "POST"
        r = httpx.request(method, f"{guarded}/sessions/{sid}/{path}", json={"action": "x"}, headers=_auth("mallory"))
        assert r.status_code == 404, (path, r.text)
    assert httpx.delete(f"{guarded}/sessions/{sid}", headers=_auth("mallory")).status_code == 404
    assert httpx.post(f"{guarded}/sessions/{sid}/reset", json={"seed": 0}, headers=_auth("alice")).status_code == 200
    assert httpx.delete(f"{guarded}/sessions/{sid}", headers=_auth("alice")).json() == {"closed": True}


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"num_tasks": 3_000_000}, "bound 10000"),
        ({"num_tasks": 10**5000 // 10**4900}, "bound 10000"),
        ({"task_seed": 2**70}, "bound"),
        ({"levels": list(range(1000))}, "1000 items"),
        ({"levels": [[[[1]]]]}, "nests deeper"),
        ({"split": "x" * 10_000}, "10000 characters"),
    ],
)
def test_client_kwargs_are_bounded(guarded: str, kwargs: dict[str, object], reason: str) -> None:
    allow = {"env_kwargs": kwargs}
    start = time.monotonic()
    r = httpx.post(guarded + "/sessions", json=allow, headers=_auth())
    assert r.status_code == 400 and reason in r.json()["error"], r.text
    assert time.monotonic() - start < 1.0  # refused before any env is made


def test_malformed_bodies_get_4xx_never_500(guarded: str) -> None:
    sid = httpx.post(guarded + "/sessions", json={}, headers=_auth()).json()["session_id"]
    reset = f"{guarded}/sessions/{sid}/reset"
    deep = b'{"seed": 0, "options": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    cases = [
        (deep, 400, "nests deeper"),
        (b'{"seed": ' + b"7" * 5000 + b"}", 400, "refuses"),  # past Python's 4300-digit limit
        (b'{"seed": ' + b"7" * 4000 + b"}", 422, "seed"),  # parsed, then bounded
        (b'{"seed": 0, "options": ' + b"[" * 40 + b"]" * 40 + b"}", 400, "nests deeper"),
        (b'{"seed": NaN}', 422, "seed"),
        (b'{"seed": 1e999}', 422, "seed"),
    ]
    for body, status, reason in cases:
        r = httpx.post(reset, content=body, headers=_auth())
        assert r.status_code == status and reason in r.json()["error"], (body[:30], r.text)
    r = httpx.post(
        guarded + "/sessions", content=b'{"env_kwargs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", headers=_auth()
    )
    assert r.status_code == 400
    assert httpx.post(reset, json={"seed": 0}, headers=_auth()).status_code == 200  # the session lived on


def test_half_sent_bodies_time_out_and_free_their_connections(guarded: str) -> None:
    port = int(guarded.rsplit(":", 1)[1])
    head = (
        f"POST /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    ).encode()
    socks = []
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(head)  # and never the rest
        socks.append(s)
    start = time.monotonic()
    assert httpx.get(guarded + "/health", timeout=2).status_code == 200  # the server answers meanwhile
    answers = []
    for s in socks:
        s.settimeout(5)
        data = b""
        while chunk := s.recv(65536):  # the server answers 408, then closes the connection
            data += chunk
        answers.append(data)
        s.close()
    elapsed = time.monotonic() - start
    print(f"\n50 half-sent bodies: all answered 408 and closed after {elapsed:.2f}s (--body-timeout-s 1)")
    assert all(a.startswith(b"HTTP/1.1 408") and b"--body-timeout-s" in a for a in answers)
    assert elapsed < 3.0


def test_partial_bodies_on_any_endpoint_are_closed_by_the_body_deadline(guarded: str) -> None:
    """20 connections declare a 1000-byte body and send 1 byte: to an endpoint that reads it (408 at
    the deadline) and to ones that answer without reading it (401, 404, a GET with a body); half of
    them then dribble a byte every 0.2 s. Every one must be closed by the body deadline (1 s)."""
    port = int(guarded.rsplit(":", 1)[1])
    heads = [
        f"POST /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n",  # read: 408
        "POST /sessions HTTP/1.1\r\nHost: x\r\n",  # no token: 401 before the body is read
        f"POST /sessions/nope/reset HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n",  # 404
        f"GET /tools HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n",  # 200, body never read
        "POST /no/such/path HTTP/1.1\r\nHost: x\r\n",  # 404
    ]
    socks: dict[socket.socket, bool] = {}  # socket -> dribbles
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall((heads[i % len(heads)] + "Content-Length: 1000\r\n\r\n{").encode())
        s.setblocking(False)
        socks[s] = i % 2 == 1
    start = time.monotonic()
    closed_at: dict[socket.socket, float] = {}
    next_drip = start
    while len(closed_at) < len(socks) and time.monotonic() - start < 8:
        live = [s for s in socks if s not in closed_at]
        if time.monotonic() >= next_drip:
            next_drip += 0.2
            for s in live:
                if socks[s]:
                    try:
                        s.send(b" ")
                    except OSError:  # the server closed it
                        closed_at[s] = time.monotonic() - start
        readable, _, _ = select.select([s for s in live if s not in closed_at], [], [], 0.05)
        for s in readable:
            try:
                while s.recv(65536):
                    pass
                closed_at[s] = time.monotonic() - start  # end of stream: closed
            except BlockingIOError:
                pass  # an answer, the connection still open
            except OSError:
                closed_at[s] = time.monotonic() - start  # reset: closed
    for s in socks:
        s.close()
    slowest = max(closed_at.values(), default=float("inf"))
    print(f"\n20 partial bodies on 5 endpoints, 10 dribbling: {len(closed_at)} closed, the last after {slowest:.2f}s")
    assert len(closed_at) == 20  # before: the dribbling ones that were answered unread stayed open
    assert slowest < 1.8  # --body-timeout-s 1; before: 5 s (uvicorn's keep-alive) for the non-dribbling ones


@pytest.mark.parametrize("action", ["hang", "spin"])  # sleeps forever; holds the GIL forever
def test_a_hung_env_call_is_killed_at_its_deadline_and_freezes_nothing(guarded: str, action: str) -> None:
    stuck, other = RemoteEnv(guarded, token=TOKEN), RemoteEnv(guarded, token=TOKEN)
    stuck.reset(seed=0)
    other.reset(seed=0)
    with ThreadPoolExecutor(1) as pool:
        start = time.monotonic()
        pending = pool.submit(stuck.step, action)
        time.sleep(0.3)
        t = time.monotonic()
        assert httpx.get(guarded + "/health", timeout=1).json()["status"] == "ok"
        assert other.step("<answer>0</answer>")[4]["reward_status"] == "ok"
        others_s = time.monotonic() - t
        _, reward, _, truncated, info = pending.result()
        elapsed = time.monotonic() - start
    print(f"\n{action}: /health and another session answered in {others_s:.2f}s; the call ended after {elapsed:.2f}s")
    assert others_s < 1.0 and not pending.cancelled()
    assert info["reward_status"] == "infra_error" and truncated and reward == 0.0
    assert "504" in info["remote"]["error"] and "--call-timeout-s" in info["remote"]["error"]
    assert 1.9 < elapsed < 3.5  # call_timeout_s=2
    stuck.close()
    other.close()


def test_deleting_a_hung_session_kills_it_at_once(guarded: str) -> None:
    sid = httpx.post(guarded + "/sessions", json={}, headers=_auth()).json()["session_id"]
    httpx.post(f"{guarded}/sessions/{sid}/reset", json={"seed": 0}, headers=_auth())
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx.post, f"{guarded}/sessions/{sid}/step", json={"action": "hang"}, headers=_auth(), timeout=10
        )
        time.sleep(0.3)
        start = time.monotonic()
        assert httpx.delete(f"{guarded}/sessions/{sid}", headers=_auth()).json() == {"closed": True}
        r = pending.result()
        elapsed = time.monotonic() - start
    assert r.status_code == 503 and elapsed < 1.5  # not at the 2 s deadline


def test_connections_that_never_finish_a_request_head_are_closed(guarded: str) -> None:
    """uvicorn held a connection that sent nothing, or half a request head, for as long as the client
    liked (500 stayed open past 42 s; a few hundred past the file limit locked everyone out). Each
    must now be closed at the head deadline (the server's --body-timeout-s, 1 s here)."""
    port = int(guarded.rsplit(":", 1)[1])
    socks: dict[socket.socket, str] = {}
    for i in range(30):
        s = socket.create_connection(("127.0.0.1", port))
        kind = ("silent", "half a head", "a header a tick")[i % 3]
        if kind != "silent":
            s.sendall(f"POST /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n".encode())
        s.setblocking(False)
        socks[s] = kind
    start = time.monotonic()
    closed_at: dict[socket.socket, float] = {}
    next_drip = start
    while len(closed_at) < len(socks) and time.monotonic() - start < 6:
        if time.monotonic() >= next_drip:
            next_drip += 0.2
            for s, kind in socks.items():
                if kind == "a header a tick" and s not in closed_at:
                    try:
                        s.send(b"X-Drip: 1\r\n")
                    except OSError:
                        closed_at[s] = time.monotonic() - start
        live = [s for s in socks if s not in closed_at]
        for s in select.select(live, [], [], 0.05)[0]:
            try:
                if not s.recv(65536):
                    closed_at[s] = time.monotonic() - start
            except BlockingIOError:
                pass
            except OSError:
                closed_at[s] = time.monotonic() - start
    assert httpx.get(guarded + "/health", timeout=2).status_code == 200
    for s in socks:
        s.close()
    slowest = max(closed_at.values(), default=float("inf"))
    print(f"\n30 connections without a whole head (silent, half, dribbling): {len(closed_at)} closed by {slowest:.2f}s")
    assert len(closed_at) == 30 and slowest < 2.5


def test_a_client_that_leaves_mid_body_is_not_logged_as_a_server_error(
    guarded: str, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        port = int(guarded.rsplit(":", 1)[1])
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(
                f"POST /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode()
            )
            time.sleep(0.1)
            s.close()
        time.sleep(0.5)
        assert httpx.get(guarded + "/health", timeout=2).status_code == 200
    finally:
        logger.removeHandler(handler)
    assert not [r for r in records if r.levelno >= logging.ERROR], [r.getMessage() for r in records]


def test_concurrent_forks_get_their_own_envs_and_stay_within_max_sessions() -> None:
    """Forks computed their slot before the session's lock: two concurrent forks could share one env
    (stepping one moved the other; closing one broke it with a 500, or a 503 read as infra_error),
    and ten concurrent forks held 10 sessions on a server limited to 8."""
    server = EnvServer(ServerConfig("prm/Math-v0", {"levels": [1]}, max_sessions=8, token=TOKEN))
    with serve_in_thread(server) as url:
        sid = httpx.post(url + "/sessions", json={}, headers=_auth()).json()["session_id"]
        assert httpx.post(f"{url}/sessions/{sid}/reset", json={"seed": 0}, headers=_auth()).status_code == 200
        with ThreadPoolExecutor(10) as pool:
            forks = list(pool.map(lambda _: httpx.post(f"{url}/sessions/{sid}/fork", headers=_auth()), range(10)))
        made = [r.json()["session_id"] for r in forks if r.status_code == 201]
        assert len(made) == 7 and {r.status_code for r in forks} == {201, 503}  # 1 + 7 = max_sessions
        assert httpx.get(url + "/health").json()["sessions"] == 8
        assert len({s.slot for s in server.sessions.values()}) == 8  # one env each
        first, second = made[0], made[1]
        done = httpx.post(f"{url}/sessions/{first}/step", json={"action": "<answer>0</answer>"}, headers=_auth())
        assert done.json()["terminated"]
        step = httpx.post(f"{url}/sessions/{second}/step", json={"action": "<answer>0</answer>"}, headers=_auth())
        assert step.status_code == 200, step.text  # its own env: not ended by the first's answer
        for other in [sid, *made[:3]]:  # closing siblings and the parent leaves the rest playable
            assert httpx.delete(f"{url}/sessions/{other}", headers=_auth()).status_code == 200
        last = made[-1]
        assert httpx.post(f"{url}/sessions/{last}/reset", json={"seed": 1}, headers=_auth()).status_code == 200


def test_env_kwargs_the_env_rejects_are_the_clients_400_not_a_500(guarded: str) -> None:
    server = EnvServer(ServerConfig("prm/Math-v0", {"levels": [1]}, token=TOKEN))
    with serve_in_thread(server) as url:
        for kwargs in ({"task_seed": -1}, {"task_seed": "x"}):
            r = httpx.post(url + "/sessions", json={"env_kwargs": kwargs}, headers=_auth())
            assert r.status_code == 400 and "rejected" in r.json()["error"], (kwargs, r.text)


def test_a_tokenless_server_answers_only_loopback_host_names() -> None:
    """A web page whose host name was rebound to 127.0.0.1 (DNS rebinding) is same-origin to the
    browser and may send JSON; without a token, only a loopback Host header is served."""
    server = EnvServer(ServerConfig("test/Flaky-v0"))
    with serve_in_thread(server) as url:
        port = url.rsplit(":", 1)[1]
        assert httpx.post(url + "/sessions", json={}).status_code == 201  # Host: 127.0.0.1:<port>
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.nip.io:{port}"):
            r = httpx.post(url + "/sessions", json={}, headers={"host": host})
            assert r.status_code == 403 and "loopback" in r.json()["error"], host
        assert httpx.post(url + "/sessions", json={}, headers={"host": f"localhost:{port}"}).status_code == 201
        assert httpx.get(url + "/health", headers={"host": "evil.example"}).status_code == 200  # no session data
