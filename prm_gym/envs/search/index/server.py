"""A retrieval server, so many rollout workers share one index.

Start it with one command::

    python -m prm_gym.envs.search.index.server --index runs/index --port 8000
    python -m prm_gym.envs.search.index.server --corpus corpus.jsonl      # index in memory first
    python -m prm_gym.envs.search.index.server --backend dense --index runs/dense   # or pyserini
    python -m prm_gym.envs.search.index.server --index runs/index --workers 4       # 4 processes, one port

Endpoints (Search-R1 retriever compatible in spirit):

* ``POST /retrieve`` ``{"queries": [...], "topk": 3, "return_scores": true}`` ->
  ``{"result": [[{"document": {"id", "title", "text", "contents"}, "score": s}, ...], ...]}``
  (documents only when ``return_scores`` is false);
* ``GET /health`` -> ``{"status": "ok", "backend": ..., "docs": ...}``.

Clients of other suites work unchanged against it: skyrl-gym's ``SearchToolGroup`` sends
``{"query": "..."}`` (one query, answered as a one-element batch), and GEM's ``SearchTool`` sends
the same object msgpack-encoded (answered in msgpack, ``{"result": [hit, ...]}`` as GEM's own
retrieval server does) when the ``msgpack`` package is installed.

Built on the standard library's ``ThreadingHTTPServer`` (a thread per connection, TCP_NODELAY,
each reply in one write); bad requests get a 4xx JSON error that names the problem. A process
holds one GIL, so ``--workers`` forks more processes onto the same port for more cores, and
``--batch-threads`` spreads one request's queries over threads (which helps heavy queries only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence, Sized
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prm_gym.core.argtypes import port_number
from prm_gym.core.errors import PRMError, ToolError
from prm_gym.envs.search.index.protocol import Retriever

#: Largest request body accepted, in bytes.
MAX_BODY_BYTES = 4 << 20
#: Most queries in one request.
MAX_BATCH = 1024


class _Handler(BaseHTTPRequestHandler):
    server: RetrievalServer
    protocol_version = "HTTP/1.1"
    #: TCP_NODELAY on the accepted socket: without it a small reply waits for the client's
    #: delayed ACK (~40 ms a call on Linux) whenever a write follows an unacknowledged one.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _reply(self, status: int, payload: dict[str, Any], packed: bool = False) -> None:
        """Status line, headers and body in ONE write (one segment for a small reply)."""
        body = _msgpack().packb(payload) if packed else json.dumps(payload, ensure_ascii=False).encode("utf-8")
        kind = "application/msgpack" if packed else "application/json"
        self.log_request(status)
        phrase = self.responses.get(status, ("",))[0]
        head = (
            f"{self.protocol_version} {status} {phrase}\r\n"
            f"Server: {self.version_string()}\r\nDate: {self.date_time_string()}\r\n"
            f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
        )
        if self.close_connection:
            head += "Connection: close\r\n"
        self.wfile.write(head.encode("latin-1") + b"\r\n" + body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/health":
            r = self.server.retriever
            docs = len(r) if isinstance(r, Sized) else -1
            self._reply(200, {"status": "ok", "backend": r.name, "docs": docs})
        else:
            self._reply(404, {"error": f"no endpoint {self.path}; use POST /retrieve or GET /health"})

    def do_POST(self) -> None:
        if self.server.stopped:  # a kept-alive connection outliving stop(): hang up
            self.close_connection = True
            return
        if self.path.rstrip("/") != "/retrieve":
            self._reply(404, {"error": f"no endpoint {self.path}; use POST /retrieve"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._reply(413, {"error": f"request body of {length} bytes exceeds {MAX_BODY_BYTES}"})
            return
        raw = self.rfile.read(length)
        packed = "msgpack" in (self.headers.get("Content-Type") or "") or _is_msgpack_map(raw)
        try:
            req = _unpack(raw) if packed else json.loads(raw or b"null")
            queries, k, scores, single = _validate(req)
            results = _answer(self.server.retriever, queries, k)
        except (ValueError, ToolError) as exc:
            self._reply(400, {"error": str(exc)})
            return
        except PRMError as exc:
            self._reply(503, {"error": f"{type(exc).__name__}: {exc}"})
            return
        except Exception as exc:  # a bug in a backend: answer 500 (not a dropped connection), then log it
            self._reply(500, {"error": f"{type(exc).__name__}: {exc}"})
            raise
        out = [
            [{"document": p.to_dict(), "score": p.score} if scores else p.to_dict() for p in hits] for hits in results
        ]
        self._reply(200, {"result": out[0] if packed and single else out}, packed and _msgpack() is not None)


def _answer(retriever: Any, queries: list[str], k: int) -> list[Any]:
    """A request's results: one ``search_batch``, or, for a backend whose batch may rank a query
    differently from a lone search (``batch_exact = False``: dense embeddings), one ``search`` per
    query, so a client batching its group's calls gets exactly what single calls would."""
    if len(queries) > 1 and not getattr(retriever, "batch_exact", True):
        return [retriever.search(q, k) for q in queries]
    return list(retriever.search_batch(queries, k))


def _is_msgpack_map(raw: bytes) -> bool:
    """Whether ``raw`` opens with a msgpack map marker (a byte no JSON text starts with)."""
    return bool(raw) and (0x80 <= raw[0] <= 0x8F or raw[0] in (0xDE, 0xDF))


def _unpack(raw: bytes) -> Any:
    """A msgpack body; a ValueError (a 400) when it is malformed or msgpack is not installed."""
    mp = _msgpack()
    if mp is None:
        raise ValueError("a msgpack request needs the msgpack package on the server (pip install msgpack)")
    try:
        return mp.unpackb(raw)
    except Exception as exc:  # msgpack's own errors are not all ValueErrors
        raise ValueError(f"body is not valid msgpack ({type(exc).__name__})") from None


def _msgpack() -> Any:
    """The optional ``msgpack`` module (GEM's wire format), or None when it is not installed."""
    try:
        import msgpack
    except ImportError:
        return None
    return msgpack


def _validate(req: Any) -> tuple[list[str], int, bool, bool]:
    """``(queries, topk, return_scores, single)``; ``single``: the request named one ``query``."""
    single = isinstance(req, dict) and isinstance(req.get("query"), str) and "queries" not in req
    if single:
        req = {**req, "queries": [req["query"]]}
    if not isinstance(req, dict) or not isinstance(req.get("queries"), list):
        raise ValueError('body must be a JSON object {"queries": [str, ...], "topk": int} or {"query": str}')
    queries = req["queries"]
    if not all(isinstance(q, str) for q in queries):
        raise ValueError("every query must be a string")
    if len(queries) > MAX_BATCH:
        raise ValueError(f"{len(queries)} queries in one request; the limit is {MAX_BATCH}")
    k = 3 if req.get("topk") is None else req["topk"]
    return queries, k, bool(req.get("return_scores", True)), single


class RetrievalServer(ThreadingHTTPServer):
    """A threaded HTTP server around one :class:`Retriever`.

    Args:
        retriever: the backend every request searches.
        host, port: where to listen; port 0 picks a free port (see :attr:`url`).
    """

    daemon_threads = True

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, verbose: bool = False):
        self.retriever = retriever
        self.verbose = verbose
        self._thread: threading.Thread | None = None
        self.stopped = False
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> RetrievalServer:
        """Serve in a background thread; returns self (use as a context manager to stop)."""
        self._thread = threading.Thread(target=self.serve_forever, name="retrieval-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent. Open keep-alive connections are hung up."""
        self.stopped = True
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()

    def __enter__(self) -> RetrievalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def fork_workers(server: RetrievalServer, extra: int) -> list[int]:
    """Fork ``extra`` processes that serve ``server``'s listening socket too; returns their pids.

    Each worker holds its own GIL, so requests spread over cores (the kernel hands each new
    connection to one of the processes accepting on the socket). Call it after the index is
    loaded and before any thread starts: the workers share the index's memory copy-on-write.
    A worker exits when its parent is gone.
    """
    parent, pids = os.getpid(), []
    if extra:
        server.socket.setblocking(False)  # a process that loses the race to accept must not block in accept()
    for _ in range(extra):
        pid = os.fork()
        if pid == 0:  # the worker: serve until the parent sends SIGTERM or disappears
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
            try:
                server.serve_forever()
            finally:
                os._exit(0)
        pids.append(pid)
    return pids


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m prm_gym.envs.search.index.server``: serve an index over HTTP."""
    from prm_gym.envs.search.index import open_retriever

    ap = argparse.ArgumentParser(description="Serve a retrieval index over HTTP (POST /retrieve).")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--index", help="an index directory (bm25, dense or pyserini)")
    src.add_argument("--corpus", help="a jsonl corpus to index in memory at start-up")
    ap.add_argument("--backend", default="bm25", choices=["bm25", "dense", "pyserini"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=port_number, default=8000, help="TCP port, 0-65535 (0: any free one)")
    ap.add_argument("--verbose", action="store_true", help="log every request")
    ap.add_argument(
        "--batch-threads", type=int, default=1, help="threads one request's queries use (bm25, pyserini backends)"
    )
    ap.add_argument("--workers", type=int, default=1, help="processes serving the port (bm25 backend; POSIX fork)")
    args = ap.parse_args(argv)
    if args.batch_threads < 1 or args.workers < 1:
        ap.error(f"--batch-threads and --workers must be >= 1, got {args.batch_threads} and {args.workers}")
    if args.workers > 1 and args.backend != "bm25":
        ap.error("--workers needs the bm25 backend (a JVM or a model does not survive fork); use one worker")
    retriever = open_retriever(args.backend, args.index or args.corpus)
    if hasattr(retriever, "threads"):
        retriever.threads = args.batch_threads
    server = RetrievalServer(retriever, args.host, args.port, args.verbose)
    workers = fork_workers(server, args.workers - 1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so the finally below stops the workers
    print(f"serving {retriever.name} on {server.url}/retrieve", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        server.server_close()


if __name__ == "__main__":
    main()
