"""``prm-play``: play episodes of a prm/ env with a policy and print them turn by turn.

Examples::

    prm-play --env prm/Math-v0 --policy hf:smollm2-135m --seed 0
    prm-play --env prm/Math-v0 --tasks tasks.jsonl --policy gold     # check a task file: every task's gold answer
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from prm_gym.agents.cli_env import add_env_flags
from prm_gym.agents.policy_ids import POLICY_HELP
from prm_gym.core.argtypes import non_negative_float, positive_int
from prm_gym.core.errors import PRMError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prm-play", description=__doc__.split("\n\n")[0])
    add_env_flags(p)
    p.add_argument(
        "--policy",
        default="hf:smollm2-135m",
        help=POLICY_HELP + "; gold: play each task's gold answer (checks a task file)",
    )
    p.add_argument("--seed", type=int, default=0, help="reset seed of the first episode")
    p.add_argument(
        "--episodes",
        type=positive_int,
        default=None,
        help="how many episodes to play (default 1; with --policy gold every task)",
    )
    p.add_argument("--task-id", default=None, help="pin a task by id")
    p.add_argument("--max-new-tokens", type=positive_int, default=200, help="tokens sampled per turn")
    p.add_argument("--temperature", type=non_negative_float, default=0.7, help="sampling temperature (0 = greedy)")
    p.add_argument(
        "--success-threshold", type=float, default=1.0, help="with --policy gold: the outcome return a task must reach"
    )
    return p


def print_episode(traj: Any, title: str, seconds: float) -> None:
    """Print an episode turn by turn: the agent's action, the env's reply, the reward and its terms."""
    print(f"=== {title} task {traj.task_id} ===")
    print(f"task: {traj.prompt}")
    for k, turn in enumerate(traj.turns, 1):
        shown = " + ".join(f"{name} {value:+.2f}" for name, value in turn.terms.items())
        print(f"--- turn {k} ---")
        print(f"agent: {turn.action.strip()}")
        print(f"env:   {turn.observation.strip()}")
        print(f"reward {turn.reward:+.3f} = {shown}   [status {turn.status}]")
    end = "terminated" if traj.terminated else "truncated"
    print(
        f"=== {end} after {len(traj.turns)} turns: return {traj.total_reward:+.3f}, "
        f"{traj.num_generated_tokens} tokens sampled in {seconds:.1f}s ==="
    )


def check_gold(env: Any, policy: Any, chat: Any, task_ids: Sequence[str], seed: int, threshold: float) -> int:
    """Play each task's gold actions; print one line per task and the count; 0 when all pass, else 1."""
    from prm_gym.agents.gold import gold_passed
    from prm_gym.agents.rollout import run_episode

    failed = []
    for tid in task_ids:
        traj = run_episode(env, policy, chat, seed=seed, task_id=tid, max_context_tokens=1 << 30)  # no sampling
        outcome = sum(t.terms.get("outcome", 0.0) for t in traj.turns)
        if gold_passed(outcome, traj.terminated, traj.infra_error, threshold):
            print(f"ok    {tid}  outcome {outcome:.3f}")
            continue
        failed.append(tid)
        why = "infra_error" if traj.infra_error else f"outcome {outcome:.3f} < {threshold}"
        last = traj.turns[-1].observation.strip().replace("\n", " ")[:160] if traj.turns else ""
        print(f"FAIL  {tid}  {why}; env said: {last}")
    print(f"gold: {len(task_ids) - len(failed)}/{len(task_ids)} tasks reach outcome {threshold}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import gymnasium as gym

    from prm_gym.agents.cli_env import make_policy_and_env
    from prm_gym.agents.gold import GOLD
    from prm_gym.agents.rollout import run_episode
    from prm_gym.core.policy import SamplingParams

    try:
        t0 = time.perf_counter()
        policy, chat, env = make_policy_and_env(args)
        print(f"loaded {args.policy} in {time.perf_counter() - t0:.1f}s")
        if args.policy == GOLD and args.task_id is None:
            ids = list(env.unwrapped.tasks.ids)[: args.episodes]
            try:
                return check_gold(env, policy, chat, ids, args.seed, args.success_threshold)
            finally:
                env.close()
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
        for ep in range(args.episodes or 1):
            t0 = time.perf_counter()
            try:
                traj = run_episode(env, policy, chat, seed=args.seed + ep, task_id=args.task_id, sampling=sampling)
            except PRMError as exc:  # e.g. a chat server that does not answer within its deadline
                print(f"prm-play: error: {exc}", file=sys.stderr)
                env.close()
                return 1
            print_episode(traj, f"episode {ep + 1}: {args.env}", time.perf_counter() - t0)
        env.close()
    except (PRMError, gym.error.Error) as exc:
        print(f"prm-play: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
