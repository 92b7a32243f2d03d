"""Who may use the env server: a shared token beyond loopback, and sessions bound to their client.

* The token comes from ``--token`` or the ``PRM_SERVE_TOKEN`` environment variable. Bound to any
  address other than loopback, the server refuses to start without one (:func:`check_bind`).
  Clients send it as ``Authorization: Bearer <token>``; it is compared in constant time
  (``hmac.compare_digest``). ``/health`` answers without it.
* Each client also sends a random ``X-PRM-Client`` key of its own (``RemoteEnv`` makes one per
  env). A session belongs to the token and client key that created it (:func:`owner`); a request
  with another pair gets 404, as if the session did not exist.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os

from prm_gym.core.errors import ConfigError

#: The environment variable holding the token (server and client).
TOKEN_ENV = "PRM_SERVE_TOKEN"
#: The header carrying a client's own key.
CLIENT_HEADER = "x-prm-client"
#: The shortest token accepted (a guessable token is no protection).
MIN_TOKEN_CHARS = 16


def resolve_token(flag: str | None) -> str | None:
    """The token: the flag, else ``$PRM_SERVE_TOKEN``, else None; too short a token is refused."""
    token = flag if flag is not None else os.environ.get(TOKEN_ENV)
    token = token.strip() if token else None
    if token and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"the prm-serve token must have at least {MIN_TOKEN_CHARS} characters "
            '(make one with: python -c "import secrets; print(secrets.token_urlsafe(32))").'
        )
    return token or None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a token."""
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"--host {host} exposes the env server beyond this machine: give it a token with --token or "
            f"${TOKEN_ENV} (clients pass the same token: RemoteEnv(token=...) or ${TOKEN_ENV})."
        )


def host_ok(host_header: str | None, token: str | None) -> bool:
    """Whether a request's ``Host`` may reach a server without a token: a loopback name only, so a web
    page whose own host name was rebound to 127.0.0.1 (DNS rebinding) cannot call it."""
    if token is not None:
        return True
    host = (host_header or "").strip()
    if host.startswith("["):  # [::1]:8000
        host = host.split("]", 1)[0] + "]"
    elif host.count(":") == 1:  # localhost:8000
        host = host.split(":", 1)[0]
    return is_loopback(host)


def token_ok(authorization: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (always, when the server has none)."""
    if token is None:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    ok = hmac.compare_digest(given.strip().encode(), token.encode())
    return ok and scheme.lower() == "bearer"


def owner(token: str | None, client_key: str | None) -> str:
    """The owner of the sessions a client creates: a digest of the token and its client key."""
    return hashlib.sha256(f"{token or ''}\0{client_key or ''}".encode()).hexdigest()
