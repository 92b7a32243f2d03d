"""The retrieval server and its client, for real on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from prm_gym.core.errors import RetrievalError, ToolError
from prm_gym.envs.search.index import BM25Index, HTTPRetriever, write_corpus
from prm_gym.envs.search.index.server import RetrievalServer
from prm_gym.envs.search.index.server import main as server_main
from prm_gym.envs.search.tasks import generate_world, world_passages

SERVE = [sys.executable, "-m", "prm_gym.envs.search.index.server"]


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build(world_passages(generate_world(120, seed=4)))


@pytest.fixture
def server(index: BM25Index) -> Iterator[RetrievalServer]:
    with RetrievalServer(index, port=0).start() as srv:
        yield srv


def test_batch_retrieve_matches_the_local_index(server: RetrievalServer, index: BM25Index) -> None:
    client = HTTPRetriever(server.url)
    queries = ["glassware company", "river city founded", "violinist born"]
    assert client.search_batch(queries, 4) == index.search_batch(queries, 4)
    assert client.search("river", 2) == index.search("river", 2)
    client.close()


def test_wire_format_is_search_r1_shaped(server: RetrievalServer, index: BM25Index) -> None:
    r = httpx.post(server.url + "/retrieve", json={"queries": ["river"], "topk": 2, "return_scores": True})
    hit = r.json()["result"][0][0]
    assert set(hit) == {"document", "score"} and {"id", "contents"} <= set(hit["document"])
    r = httpx.post(server.url + "/retrieve", json={"queries": ["river"], "topk": 2, "return_scores": False})
    assert r.json()["result"][0][0]["id"] == index.search("river", 1)[0].id
    health = httpx.get(server.url + "/health").json()
    assert health == {"status": "ok", "backend": "bm25", "docs": len(index)}


def test_bad_requests_get_clear_4xx(server: RetrievalServer) -> None:
    url = server.url + "/retrieve"
    assert httpx.post(url, content=b"not json").status_code == 400
    assert httpx.post(url, json={"q": 1}).status_code == 400
    r = httpx.post(url, json={"queries": [""], "topk": 3})
    assert r.status_code == 400 and "empty" in r.json()["error"]
    r = httpx.post(url, json={"queries": ["x" * 100_000], "topk": 3})
    assert r.status_code == 400 and "limit" in r.json()["error"]
    assert httpx.post(url, content=b"x" * (5 << 20)).status_code == 413
    assert httpx.get(server.url + "/nope").status_code == 404
    with pytest.raises(ToolError, match="empty"):
        HTTPRetriever(server.url).search("   ", 3)


def test_a_backend_bug_answers_500_instead_of_dropping_the_connection(index: BM25Index) -> None:
    class Buggy:
        def search_batch(self, queries: list[str], k: int) -> list[list[object]]:
            raise TypeError("a bug in the backend")

    with RetrievalServer(Buggy(), port=0).start() as srv:  # type: ignore[arg-type]
        r = httpx.post(srv.url + "/retrieve", json={"queries": ["river"], "topk": 3})
        assert r.status_code == 500 and "TypeError: a bug in the backend" in r.json()["error"]
        with pytest.raises(RetrievalError, match="HTTP 500"):
            HTTPRetriever(srv.url).search("river", 3)


def test_server_down_is_a_retrieval_error(index: BM25Index) -> None:
    srv = RetrievalServer(index, port=0)
    url = srv.url
    srv.stop()  # the port is closed again
    with pytest.raises(RetrievalError, match="unreachable"):
        HTTPRetriever(url, timeout_s=2).search("river", 3)


class _Slow(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        time.sleep(1.5)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class _Garbage(_Slow):
    def do_POST(self) -> None:
        body = b'{"result": "nope"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize(("handler", "match"), [(_Slow, "did not answer within"), (_Garbage, "garbage")])
def test_slow_or_garbage_server_is_a_retrieval_error(handler: type, match: str) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(RetrievalError, match=match):
            HTTPRetriever(f"http://127.0.0.1:{srv.server_address[1]}", timeout_s=0.3).search("river", 3)
    finally:
        srv.shutdown()
        srv.server_close()


def test_server_starts_with_one_command(tmp_path: Path) -> None:
    corpus = write_corpus(world_passages(generate_world(40, seed=0)), tmp_path / "corpus.jsonl")
    proc = subprocess.Popen(
        [*SERVE, "--corpus", str(corpus), "--port", "0", "--batch-threads", "2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving bm25 on http://127.0.0.1:"), line
        url = line.split()[-1]
        r = httpx.post(url, json={"queries": ["river", "company", "city"], "topk": 2}, timeout=10)
        result = r.json()["result"]  # a batch spread over two threads, answered in order
        want = BM25Index.from_corpus(corpus).search_batch(["river", "company", "city"], 2)
        assert [[h["document"]["id"] for h in hits] for hits in result] == [[p.id for p in w] for w in want]
        assert json.dumps(result)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_search_call_does_not_stall_on_nagle(server: RetrievalServer) -> None:
    """A deadline, not a timing benchmark: Nagle plus delayed ACK stalls a reply ~40 ms.

    Headers and body written separately (or a request split in two writes) wait for the peer's
    delayed ACK; every call on a kept-alive connection then takes >= 40 ms on Linux loopback.
    """
    client = HTTPRetriever(server.url)
    client.search("river city", 3)  # connect and warm up
    times = []
    for _ in range(20):
        t = time.perf_counter()
        client.search("river city", 3)
        times.append(time.perf_counter() - t)
    client.close()
    times.sort()
    assert times[len(times) // 2] < 0.020, f"median search call {times[len(times) // 2] * 1e3:.1f} ms"


def test_skyrl_and_gem_shaped_requests_are_answered(server: RetrievalServer, index: BM25Index) -> None:
    """skyrl-gym's SearchToolGroup posts JSON {"query": str} and reads result[0]; GEM's SearchTool
    posts the same object in msgpack and reads a flat result list, also in msgpack."""
    msgpack = pytest.importorskip("msgpack")
    want = [p.id for p in index.search("river city", 3)]
    r = httpx.post(server.url + "/retrieve", json={"query": "river city", "topk": 3, "return_scores": True})
    assert [h["document"]["id"] for h in r.json()["result"][0]] == want
    body = msgpack.packb({"query": "river city", "topk": 3, "return_scores": True})
    r = httpx.post(server.url + "/retrieve", content=body)
    assert r.headers["content-type"] == "application/msgpack"
    hits = msgpack.unpackb(r.content)["result"]
    assert [h["document"]["id"] for h in hits] == want and "contents" in hits[0]["document"]
    r = httpx.post(server.url + "/retrieve", content=b"\x83\xa5query", headers={"Content-Type": "application/msgpack"})
    assert r.status_code == 400 and "msgpack" in r.json()["error"]


def test_one_client_shared_by_threads_and_a_dropped_connection(index: BM25Index) -> None:
    """Each thread keeps its own connection; a kept-alive connection the server hangs up is
    retried once, and a server that is gone is a RetrievalError, never an http.client error."""
    srv = RetrievalServer(index, port=0).start()
    client = HTTPRetriever(srv.url)
    queries = ["glassware company", "river city founded", "violinist born", "tea company"]
    want = index.search_batch(queries, 3)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: client.search(queries[i % 4], 3), range(64)))
    assert got == [want[i % 4] for i in range(64)]
    srv.stop()
    with pytest.raises(RetrievalError, match="unreachable"):
        client.search("river", 3)
    client.close()


def test_batch_threads_must_be_positive() -> None:
    with pytest.raises(SystemExit):
        server_main(["--corpus", "x.jsonl", "--batch-threads", "0"])


def test_worker_processes_share_the_port_and_stop_with_the_server(tmp_path: Path) -> None:
    corpus = write_corpus(world_passages(generate_world(40, seed=0)), tmp_path / "corpus.jsonl")
    proc = subprocess.Popen(
        [*SERVE, "--corpus", str(corpus), "--port", "0", "--workers", "3"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1].removesuffix("/retrieve")
        children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        assert len(children) == 2
        client = HTTPRetriever(url)
        want = BM25Index.from_corpus(corpus).search("river city", 3)
        with ThreadPoolExecutor(8) as pool:
            assert all(got == want for got in pool.map(lambda _: client.search("river city", 3), range(48)))
        client.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    for pid in children:  # the workers went with it
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(SystemExit):
        server_main(["--corpus", str(corpus), "--workers", "2", "--backend", "dense"])
