"""The env flags ``prm-play`` and ``prm-export`` share with ``train-agent``, and the env and
policy they build: ``--env``, ``--tasks``, ``--env-kwargs``, ``--judge``, ``--tool-format``,
``--imports`` (``--import``: a deprecated alias) and ``--policy`` (``gold``: the task's gold actions).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from prm_gym.core.errors import ConfigError
from prm_gym.core.imports import import_modules
from prm_gym.core.make import make_env

TOOL_FORMATS = ("auto", "hermes", "llama3", "mistral", "qwen", "openai")


class _DeprecatedImport(argparse.Action):
    """``--import M``: appends to ``imports`` as ``--imports`` does, and says it is deprecated."""

    def __call__(self, parser: argparse.ArgumentParser, ns: argparse.Namespace, value: Any, opt: Any = None) -> None:
        print(f"{parser.prog}: warning: --import is deprecated; use --imports {value}", file=sys.stderr)
        ns.imports = [*(ns.imports or []), value]


def add_env_flags(p: argparse.ArgumentParser) -> None:
    """Add the env flags (the same names as ``train-agent``'s) to ``p``."""
    p.add_argument("--env", default="prm/Math-v0", help="a registered env id (default: prm/Math-v0)")
    p.add_argument(
        "--tasks",
        default="",
        help="the env's tasks instead of its generator: a task file (jsonl, json, parquet, arrow), a dataset "
        "folder, dataset:<format>:<path> or humaneval (docs/envs/datasets.md); over --env-kwargs",
    )
    p.add_argument("--env-kwargs", default="", help="JSON keyword arguments for gym.make, e.g. '{\"levels\": [1]}'")
    p.add_argument("--judge", default=None, help="override the env's judge expression")
    p.add_argument(
        "--tool-format",
        default="auto",
        choices=TOOL_FORMATS,
        help="how the policy writes tool calls (docs/tool_formats.md); auto reads it from the chat template",
    )
    p.add_argument("--imports", action="append", default=[], help="a module to import first (third-party envs, judges)")
    p.add_argument("--import", dest="imports", action=_DeprecatedImport, help=argparse.SUPPRESS)


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``gym.make``'s keyword arguments: ``--env-kwargs``, then ``--judge`` and ``--tasks`` over them.

    Raises:
        ConfigError: ``--env-kwargs`` is not a JSON object.
    """
    try:
        kw = json.loads(args.env_kwargs) if args.env_kwargs.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--env-kwargs must be a JSON object such as '{{\"levels\": [1]}}': {exc}") from exc
    if not isinstance(kw, dict):
        raise ConfigError("--env-kwargs must be a JSON object such as '{\"levels\": [1]}'.")
    if args.judge:
        kw["judge"] = args.judge
    if args.tasks:
        kw["tasks"] = args.tasks
    return kw


def make_policy_and_env(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The policy (``--policy``; ``gold`` plays each task's gold actions), its chat template and the
    env (``--env`` with :func:`env_kwargs`, parsing the template's tool format).

    Raises:
        ConfigError: a bad flag; an env that cannot be made raises ``gym.error.Error`` or a PRMError.
    """
    import gymnasium as gym

    import prm_gym.envs  # noqa: F401  (registers prm/ ids)
    from prm_gym.agents.chat import ChatTemplate
    from prm_gym.agents.gold import GOLD, GoldPolicy

    import_modules(args.imports)
    spec = gym.spec(args.env)  # an unknown id, or an env module missing its extra, fails before a model loads
    if isinstance(spec.entry_point, str):
        gym.envs.registration.load_env_creator(spec.entry_point)
    policy: Any
    if args.policy == GOLD:
        policy = GoldPolicy()
    else:
        from prm_gym.agents.policy_ids import load_policy

        policy = load_policy(args.policy, seed=args.seed)
    chat = ChatTemplate(policy.tokenizer, tool_format=args.tool_format)
    env = make_env(args.env, **chat.env_kwargs(env_kwargs(args)))
    if isinstance(policy, GoldPolicy):
        policy.env = env
    return policy, chat, env
