"""Export trajectories to jsonl or parquet for SFT, offline RL or analysis with ``datasets``.

Each trajectory becomes one row::

    {"env_id", "task_id", "prompt", "seed", "policy_version", "terminated", "truncated",
     "infra_error", "total_reward", "num_turns", "num_generated_tokens",
     "messages": [{"role", "content"}, ...],          # chat format SFT trainers read
     "turns": [{"action", "observation", "reward", "status", "terms": {<term>: float},
                "judges": [{"id", "score", "error"}], "tool_calls", "tool_failed"}, ...],
     "token_ids", "loss_mask", "logprobs"}              # only with include_tokens=True

Load them back with ``datasets.load_dataset("json" | "parquet", data_files=path)``. From the shell,
``prm-export --env prm/Math-v0 --policy hf:tiny --episodes 8 --output runs/math.parquet``
plays episodes and writes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from prm_gym.agents.cli_env import add_env_flags
from prm_gym.agents.policy_ids import POLICY_HELP
from prm_gym.agents.rollout import Trajectory, TurnRecord
from prm_gym.core.argtypes import positive_int
from prm_gym.core.errors import ConfigError
from prm_gym.core.progress import track

FORMATS = ("jsonl", "parquet")


def _judges(info: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for jid, diag in (info.get("judge") or {}).items():
        score = diag.get("score") if isinstance(diag, dict) else None
        error = str(diag.get("error", "")) if isinstance(diag, dict) else ""
        out.append({"id": str(jid), "score": None if score is None else float(score), "error": error})
    return out


def _turn(turn: TurnRecord, term_names: Sequence[str]) -> dict[str, Any]:
    tool = turn.info.get("tool") or {}
    return {
        "action": turn.action,
        "observation": turn.observation,
        "reward": float(turn.reward),
        "status": turn.status,
        "terms": {name: turn.terms.get(name) for name in term_names},
        "judges": _judges(turn.info),
        "tool_calls": int(tool.get("calls", 0)),
        "tool_failed": int(tool.get("failed", 0)),
    }


def chat_messages(traj: Trajectory, observation_role: str = "user") -> list[dict[str, str]]:
    """The episode as chat messages: the prompt, then each action and the observation that answered it.

    The observation after the last turn ("Answer received.") is left out: nothing learns from it.
    """
    messages = [{"role": "user", "content": traj.prompt}]
    for i, turn in enumerate(traj.turns):
        messages.append({"role": "assistant", "content": turn.action})
        if i + 1 < len(traj.turns):
            messages.append({"role": observation_role, "content": turn.observation})
    return messages


def trajectory_record(
    traj: Trajectory,
    *,
    env_id: str = "",
    include_tokens: bool = False,
    term_names: Sequence[str] | None = None,
    observation_role: str = "user",
) -> dict[str, Any]:
    """One trajectory as a flat, JSON-able row (see the module docstring for the fields).

    Args:
        traj: the trajectory.
        env_id: recorded in the row's ``env_id``.
        include_tokens: also export ``token_ids``, ``loss_mask`` and ``logprobs``.
        term_names: the reward terms every row carries (missing ones are None), so all rows
            share one schema; default: this trajectory's terms.
        observation_role: the chat role of observations in ``messages``.
    """
    names = list(term_names) if term_names is not None else list(dict.fromkeys(k for t in traj.turns for k in t.terms))
    record: dict[str, Any] = {
        "env_id": env_id,
        "task_id": traj.task_id,
        "prompt": traj.prompt,
        "seed": traj.seed,
        "policy_version": int(traj.policy_version),
        "terminated": bool(traj.terminated),
        "truncated": bool(traj.truncated),
        "infra_error": bool(traj.infra_error),
        "total_reward": traj.total_reward,
        "num_turns": len(traj.turns),
        "num_generated_tokens": traj.num_generated_tokens,
        "messages": chat_messages(traj, observation_role),
        "turns": [_turn(t, names) for t in traj.turns],
    }
    if include_tokens:
        record.update(
            token_ids=[int(i) for i in traj.token_ids],
            loss_mask=[int(m) for m in traj.loss_mask],
            logprobs=[float(x) for x in traj.logprobs],
        )
    return record


def export_trajectories(
    trajs: Iterable[Trajectory],
    path: str | Path,
    *,
    env_id: str = "",
    include_tokens: bool = False,
    keep: Callable[[Trajectory], bool] | None = None,
) -> int:
    """Write trajectories to ``path``; the format follows the suffix (``.jsonl`` or ``.parquet``).

    Args:
        trajs: the trajectories.
        path: the output file; its parent directories are created.
        env_id: recorded in every row.
        include_tokens: also export token ids, loss masks and behaviour log-probs.
        keep: a filter, e.g. ``lambda t: not t.infra_error and t.total_reward > 0`` for SFT data.

    Returns:
        The number of rows written.

    Raises:
        ValueError: the suffix is neither ``.jsonl`` nor ``.parquet``.
    """
    out = Path(path)
    fmt = out.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ConfigError(f"cannot export to {out.name!r}: name the file *.jsonl or *.parquet.")
    kept = [t for t in trajs if keep is None or keep(t)]
    names = list(dict.fromkeys(k for t in kept for turn in t.turns for k in turn.terms))
    rows = [trajectory_record(t, env_id=env_id, include_tokens=include_tokens, term_names=names) for t in kept]
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        with out.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        _write_parquet(rows, out, names, include_tokens)
    return len(rows)


def _write_parquet(rows: list[dict[str, Any]], out: Path, term_names: Sequence[str], include_tokens: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    judge = pa.struct([("id", pa.string()), ("score", pa.float64()), ("error", pa.string())])
    turn = pa.struct(
        [
            ("action", pa.string()),
            ("observation", pa.string()),
            ("reward", pa.float64()),
            ("status", pa.string()),
            ("terms", pa.struct([(n, pa.float64()) for n in term_names]) if term_names else pa.null()),
            ("judges", pa.list_(judge)),
            ("tool_calls", pa.int64()),
            ("tool_failed", pa.int64()),
        ]
    )
    fields = [
        ("env_id", pa.string()),
        ("task_id", pa.string()),
        ("prompt", pa.string()),
        ("seed", pa.int64()),
        ("policy_version", pa.int64()),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("infra_error", pa.bool_()),
        ("total_reward", pa.float64()),
        ("num_turns", pa.int64()),
        ("num_generated_tokens", pa.int64()),
        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("turns", pa.list_(turn)),
    ]
    if include_tokens:
        fields += [
            ("token_ids", pa.list_(pa.int64())),
            ("loss_mask", pa.list_(pa.int8())),
            ("logprobs", pa.list_(pa.float64())),
        ]
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(fields)), out)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prm-export", description="Play episodes and export them to jsonl or parquet.")
    add_env_flags(p)
    p.add_argument("--policy", default="hf:tiny", help=POLICY_HELP + "; gold: the tasks' gold answers")
    p.add_argument("--episodes", type=positive_int, default=4, help="how many episodes to play")
    p.add_argument("--seed", type=int, default=0, help="reset seed of the first episode")
    p.add_argument("--output", required=True, help="output file, *.jsonl or *.parquet")
    p.add_argument("--max-new-tokens", type=positive_int, default=128, help="tokens sampled per turn")
    p.add_argument("--tokens", action="store_true", help="also export token ids, loss masks and log-probs")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show a progress bar on stderr (on a terminal; PRM_GYM_PROGRESS=0/1 turns bars off/on everywhere)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The ``prm-export`` command."""
    args = _parser().parse_args(argv)
    if Path(args.output).suffix.lstrip(".").lower() not in FORMATS:
        print(f"prm-export: error: --output {args.output!r}: name the file *.jsonl or *.parquet.", file=sys.stderr)
        return 2
    import gymnasium as gym

    from prm_gym.agents.cli_env import make_policy_and_env
    from prm_gym.agents.rollout import run_episode
    from prm_gym.core.errors import PRMError
    from prm_gym.core.policy import ChatPolicy, SamplingParams

    try:
        policy, chat, env = make_policy_and_env(args)
        if args.tokens and isinstance(policy, ChatPolicy):
            env.close()
            raise ConfigError("--tokens: a chat server's policy returns text, not token ids; drop --tokens.")
    except (PRMError, gym.error.Error) as exc:
        print(f"prm-export: error: {exc}", file=sys.stderr)
        return 2
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens)
    episodes = track(range(args.episodes), desc="prm-export", unit="episode", enabled=args.progress, delay=0.0)
    try:
        trajs = [run_episode(env, policy, chat, seed=args.seed + k, sampling=sampling) for k in episodes]
    except PRMError as exc:  # e.g. a chat server that does not answer within its deadline
        print(f"prm-export: error: {exc}", file=sys.stderr)
        return 1
    finally:
        env.close()
    n = export_trajectories(trajs, args.output, env_id=args.env, include_tokens=args.tokens)
    print(f"wrote {n} trajectories to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
