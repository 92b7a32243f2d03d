"""``prm-serve``: serve one registered env over HTTP (FastAPI under uvicorn).

Examples::

    prm-serve --env prm/SQL-v0 --port 8000
    prm-serve --env prm/Math-v0 --env-kwargs '{"levels": [1, 2]}' --idle-timeout-s 120
    PRM_SERVE_TOKEN=$(cat token) prm-serve --imports weather_agent --env weather/Forecast-v0 --host 0.0.0.0

Beyond loopback the server needs a token (``--token`` or ``$PRM_SERVE_TOKEN``) and refuses to
start without one; clients send the same token (``RemoteEnv(token=...)`` or ``$PRM_SERVE_TOKEN``).

Play it with :class:`prm_gym.envs.remote.RemoteEnv` (a ``gymnasium.Env``), ``train-agent
--env-url http://host:8000``, or plain HTTP from any language (see docs/envs/remote.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from prm_gym.core.argtypes import port_number
from prm_gym.core.errors import ConfigError, PRMError
from prm_gym.core.extras import require
from prm_gym.core.imports import import_modules
from prm_gym.envs.serve import auth
from prm_gym.envs.serve.limits import KwargBounds
from prm_gym.envs.serve.sessions import DEFAULT_ALLOWED_KWARGS, EnvServer, ServerConfig


def parse_args(argv: Sequence[str] | None = None) -> tuple[ServerConfig, str, int]:
    """The server's config, host and port from command-line flags."""
    p = argparse.ArgumentParser(
        prog="prm-serve", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", required=True, help="registered env id, e.g. prm/SQL-v0")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: every interface)")
    p.add_argument("--port", type=port_number, default=8000, help="TCP port, 0-65535 (0: any free one)")
    p.add_argument("--env-kwargs", default="", help="JSON keyword arguments for gym.make, e.g. '{\"levels\": [1]}'")
    p.add_argument(
        "--allow-kwargs",
        default=",".join(sorted(DEFAULT_ALLOWED_KWARGS)),
        help="comma-separated env kwargs a client may set per session (default: %(default)s)",
    )
    p.add_argument("--idle-timeout-s", type=float, default=300.0, help="close sessions idle this long")
    p.add_argument("--max-sessions", type=int, default=256, help="most open sessions")
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="longer bodies get 413 (default: 1 MiB or room for the longest action)",
    )
    p.add_argument("--threads", type=int, default=64, help="env calls running at once")
    p.add_argument(
        "--token",
        default=None,
        help=f"shared secret clients must send (default: ${auth.TOKEN_ENV}); required beyond loopback",
    )
    p.add_argument(
        "--call-timeout-s",
        type=float,
        default=60.0,
        help="deadline of one env call; past it the session's worker process is killed (504, infra_error); keep it "
        "above an env's turn_budget_s (20 s) plus one tool's deadline plus its judges' (math-verify 5 s, an LLM "
        "judge 30 s), so no agent's slow turn reaches it",
    )
    p.add_argument("--body-timeout-s", type=float, default=10.0, help="deadline for receiving a request body (408)")
    p.add_argument(
        "--max-num-tasks", type=int, default=KwargBounds.max_num_tasks, help="largest num_tasks a client may ask for"
    )
    p.add_argument("--imports", action="append", default=[], help="a module to import first (third-party envs)")
    a = p.parse_args(argv)
    import_modules(a.imports)
    try:
        kwargs = json.loads(a.env_kwargs) if a.env_kwargs.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--env-kwargs must be a JSON object such as '{{\"levels\": [1]}}': {exc}") from exc
    if not isinstance(kwargs, dict):
        raise ConfigError("--env-kwargs must be a JSON object such as '{\"levels\": [1]}'.")
    allow = frozenset(k.strip() for k in a.allow_kwargs.split(",") if k.strip())
    token = auth.resolve_token(a.token)
    auth.check_bind(a.host, token)
    cfg = ServerConfig(
        a.env,
        kwargs,
        allow,
        a.idle_timeout_s,
        a.max_sessions,
        a.max_body_bytes,
        a.threads,
        token=token,
        call_timeout_s=a.call_timeout_s,
        body_timeout_s=a.body_timeout_s,
        bounds=KwargBounds(max_num_tasks=a.max_num_tasks),
        imports=tuple(a.imports),
    )
    return cfg, a.host, a.port


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``prm-serve``."""
    try:
        cfg, host, port = parse_args(argv)
        require("uvicorn", "serve", "the env server (prm-serve)")
        from prm_gym.envs.serve import listener
        from prm_gym.envs.serve.app import build_app

        server = EnvServer(cfg)
    except (PRMError, TypeError) as exc:
        print(f"prm-serve: error: {exc}", file=sys.stderr)
        return 2
    guard = "token required" if cfg.token else "no token: loopback only"
    print(f"prm-serve: serving {cfg.env_id} on http://{host}:{port} ({guard})", file=sys.stderr)
    listener.server(build_app(server), cfg, host=host, port=port).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
