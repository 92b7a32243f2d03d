"""How prm-serve listens: uvicorn's settings and its HTTP/1.1 protocol with a deadline on request heads.

uvicorn closes an idle keep-alive connection after a request, but holds a fresh connection that
sends nothing, or half a request head, for as long as the client likes: 500 such connections from
one client stayed open, and a few hundred past the process's file limit left the server unable
to accept anyone (and asyncio logging each refused accept, 94 MB of log in 10 s). Here:

* a connection must deliver each request's head within ``head_timeout_s`` of connecting or of
  its previous response, or it is closed (:class:`HeadDeadline`);
* past :func:`concurrency` open connections or running requests (four a session and 64, at most
  half the file limit) a new request answers 503 at once instead of queueing its body in memory;
* asyncio's "accept out of system resource" error is logged once a minute, not once per try.

Beyond loopback, put the server behind a proxy that limits connections per client: a deadline
bounds how long one connection is held, not how many a client opens within it.
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any

from prm_gym.core.extras import require

uvicorn = require("uvicorn", "serve", "the env server (prm-serve)")
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402  (after the extra's check)

#: How often asyncio's accept errors (the file limit reached) reach the log.
ACCEPT_ERROR_EVERY_S = 60.0


class HeadDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not complete within
    ``head_timeout_s`` of the connection or of its previous response."""

    head_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _head_late(self) -> None:
        self._head_timer = None
        if self._waiting_for_head() and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._waiting_for_head():
            self._disarm()  # a request is being served: the body has its own deadline

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._waiting_for_head() and not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def _quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Log asyncio's accept errors at most once every :data:`ACCEPT_ERROR_EVERY_S` seconds."""
    default = loop.get_exception_handler()
    last = [-ACCEPT_ERROR_EVERY_S]

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "accept" in str(context.get("message", "")):
            now = time.monotonic()
            if now - last[0] < ACCEPT_ERROR_EVERY_S:
                return
            last[0] = now
        (default or asyncio.AbstractEventLoop.default_exception_handler)(loop, context)

    loop.set_exception_handler(handler)


def concurrency(max_sessions: int) -> int:
    """Open connections or running requests past which a new request answers 503: four a session and 64
    more, but at most half the process's file limit (a session's worker holds descriptors too), so the
    503 comes before the server runs out of descriptors."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    bound = 4 * max_sessions + 64
    return bound if soft == resource.RLIM_INFINITY else max(16, min(bound, soft // 2))


def server(app: Any, cfg: Any, **kwargs: Any) -> Any:
    """A uvicorn ``Server`` for ``app`` with the bounds above, from the server's config ``cfg``
    (:class:`prm_gym.envs.serve.sessions.ServerConfig`: request heads get its ``body_timeout_s``,
    concurrency four requests a session); ``kwargs`` go to uvicorn's ``Config`` as they are."""
    protocol = type("HeadDeadline", (HeadDeadline,), {"head_timeout_s": cfg.body_timeout_s})
    config = uvicorn.Config(
        app,
        http=protocol,
        limit_concurrency=concurrency(cfg.max_sessions),
        timeout_keep_alive=5,
        log_level="warning",
        **kwargs,
    )
    return uvicorn.Server(config)


def install_accept_log_limit() -> None:
    """Called in the app's lifespan, on the server's loop."""
    _quiet_accept_errors(asyncio.get_running_loop())
