"""``prm-play``: play episodes of a prm/ env with a policy and print them turn by turn.

Example::

    prm-play --env prm/Math-v0 --policy hf:smollm2-135m --seed 0
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from prm_gym.agents.policy_ids import POLICY_HELP


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prm-play", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="prm/Math-v0", help="a registered env id (default: prm/Math-v0)")
    p.add_argument("--policy", default="hf:smollm2-135m", help=POLICY_HELP)
    p.add_argument("--seed", type=int, default=0, help="reset seed of the first episode")
    p.add_argument("--episodes", type=int, default=1, help="how many episodes to play")
    p.add_argument("--task-id", default=None, help="pin a task by id")
    p.add_argument("--judge", default=None, help="override the env's judge expression")
    p.add_argument("--max-new-tokens", type=int, default=200, help="tokens sampled per turn")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (0 = greedy)")
    p.add_argument(
        "--import", dest="imports", action="append", default=[], help="import a module that registers envs or judges"
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import importlib

    import gymnasium as gym

    import prm_gym.envs  # noqa: F401  (registers prm/ ids)
    from prm_gym.agents.chat import ChatTemplate
    from prm_gym.agents.policy_ids import load_policy
    from prm_gym.agents.rollout import run_episode
    from prm_gym.core.errors import PRMError
    from prm_gym.core.policy import SamplingParams

    for mod in args.imports:
        importlib.import_module(mod)
    try:
        kwargs = {"judge": args.judge} if args.judge else {}
        env = gym.make(args.env, **kwargs)
        t0 = time.perf_counter()
        policy = load_policy(args.policy, seed=args.seed)
        print(f"loaded {args.policy} in {time.perf_counter() - t0:.1f}s")
    except (PRMError, gym.error.Error) as exc:
        print(f"prm-play: error: {exc}", file=sys.stderr)
        return 2
    chat = ChatTemplate(policy.tokenizer)
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    for ep in range(args.episodes):
        t0 = time.perf_counter()
        try:
            traj = run_episode(env, policy, chat, seed=args.seed + ep, task_id=args.task_id, sampling=sampling)
        except PRMError as exc:  # e.g. a chat server that does not answer within its deadline
            print(f"prm-play: error: {exc}", file=sys.stderr)
            env.close()
            return 1
        print_episode(traj, f"episode {ep + 1}: {args.env}", time.perf_counter() - t0)
    env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
