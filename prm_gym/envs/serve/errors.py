"""The env server's one error type: an HTTP status and a reason for the client."""

from __future__ import annotations


class HTTPError(Exception):
    """Answered as ``{"error": reason}`` with ``status``."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason
