"""The episode loop: run envs with a policy and record trajectories token by token.

:func:`rollout` steps a batch of envs in lockstep, sampling every live episode's next turn in
one batched ``policy.generate`` call, then stepping the envs inside
:func:`prm_gym.envs.turn_batch.batched_turn`, so envs that share a backend (prm/Search-v0 envs on
one retrieval server or index) fetch the turn's tool calls in one batch. Each :class:`Trajectory`
holds the exact token ids the policy saw and sampled, a loss mask that is 1 only on sampled ids,
the behaviour log-probs, and per-turn rewards and infos.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

from prm_gym.agents.chat import ChatTemplate
from prm_gym.core.policy import ChatPolicy, Generation, Policy, SamplingParams
from prm_gym.envs.turn_batch import batched_turn

DEFAULT_SAMPLING = SamplingParams()


@dataclass
class TurnRecord:
    """One agent turn of a trajectory.

    Attributes:
        action: the decoded text of the sampled ids.
        observation: what the env returned.
        reward: the env's reward for the turn; ``terms`` holds its ``reward_*`` terms.
        status: the turn's ``reward_status`` (``ok`` or ``infra_error``).
        start, end: the span of this turn's sampled ids in ``Trajectory.token_ids``.
        info: the env's full info dict.
    """

    action: str
    observation: str
    reward: float
    terms: dict[str, float]
    status: str
    start: int
    end: int
    info: dict[str, Any] = field(repr=False)


def tool_calls(turns: Sequence[TurnRecord]) -> int:
    """The tool calls the env ran over ``turns`` (each turn's ``info["tool"]["calls"]``)."""
    return int(sum(int(t.info.get("tool", {}).get("calls", 0)) for t in turns))


@dataclass
class Trajectory:
    """One episode, as the trainer consumes it."""

    task_id: str
    prompt: str
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    policy_version: int = 0
    seed: int | None = None
    env_id: str = ""
    """The env id it was played in (set by the trainer's rollout workers; "" when unknown)."""

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def infra_error(self) -> bool:
        return any(t.status == "infra_error" for t in self.turns)

    @property
    def num_generated_tokens(self) -> int:
        return int(sum(self.loss_mask))

    def extend(self, ids: Sequence[int], trained: bool, logprobs: Sequence[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([int(trained)] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _record(action: str, obs: str, reward: Any, info: dict[str, Any], start: int, end: int) -> TurnRecord:
    """A turn's record from what ``env.step`` returned (its ``reward_*`` terms gathered)."""
    terms = {k[7:]: float(v) for k, v in info.items() if k.startswith("reward_") and k != "reward_status"}
    return TurnRecord(action, obs, float(reward), terms, info.get("reward_status", "ok"), start, end, info)


def _play_chat(
    envs: Sequence[gym.Env],
    trajs: list[Trajectory],
    policy: ChatPolicy,
    chat: ChatTemplate,
    conversations: list[list[dict[str, Any]]],
    tools: list[list[dict[str, Any]]],
    sampling: SamplingParams,
    batch_tools: bool = True,
) -> None:
    """:func:`_play` for a chat policy: each episode is a conversation of messages (no token ids;
    the env's tools go as ``tools=``, the replies' tool calls come back in ``chat.tool_format``)."""
    done = [False] * len(envs)
    while not all(done):
        live = [i for i, finished in enumerate(done) if not finished]
        replies = policy.chat([conversations[i] for i in live], [tools[i] for i in live], sampling, chat.tool_format)
        with batched_turn([envs[i] for i in live], [r.text for r in replies], batch_tools):
            for i, reply in zip(live, replies, strict=True):
                obs, reward, terminated, truncated, info = envs[i].step(reply.text)
                trajs[i].turns.append(_record(reply.text, obs, reward, info, 0, 0))
                if terminated or truncated:
                    trajs[i].terminated, trajs[i].truncated, done[i] = bool(terminated), bool(truncated), True
                    continue
                conversations[i] += [reply.message, *policy.followup(reply, obs)]


def _play(
    envs: Sequence[gym.Env],
    trajs: list[Trajectory],
    policy: Policy,
    chat: ChatTemplate,
    sampling: SamplingParams,
    max_context_tokens: int,
    batch_tools: bool = True,
) -> None:
    """Step every env until its episode ends, appending turns to its trajectory."""
    n = len(envs)
    done = [False] * n
    while not all(done):
        live = [i for i, finished in enumerate(done) if not finished]
        gens = policy.generate([trajs[i].token_ids for i in live], sampling)
        with batched_turn([envs[i] for i in live], [g.text for g in gens], batch_tools):
            _step_turn(envs, trajs, live, gens, done, chat, sampling, max_context_tokens)


def _step_turn(
    envs: Sequence[gym.Env],
    trajs: list[Trajectory],
    live: list[int],
    gens: Sequence[Generation],
    done: list[bool],
    chat: ChatTemplate,
    sampling: SamplingParams,
    max_context_tokens: int,
) -> None:
    """Step each live env with its generation, one after another (:func:`_play`'s turn)."""
    for i, gen in zip(live, gens, strict=True):
        traj, start = trajs[i], len(trajs[i].token_ids)
        traj.extend(gen.token_ids, trained=True, logprobs=gen.logprobs)
        obs, reward, terminated, truncated, info = envs[i].step(gen.text)
        traj.turns.append(_record(gen.text, obs, reward, info, start, len(traj.token_ids)))
        if terminated or truncated:
            traj.terminated, traj.truncated, done[i] = bool(terminated), bool(truncated), True
            traj.extend(chat.closing_ids(gen.token_ids), trained=False)
            continue
        nxt = chat.observation_ids(obs, gen.token_ids)
        if len(traj.token_ids) + len(nxt) + sampling.max_new_tokens > max_context_tokens:
            traj.truncated, done[i] = True, True
            traj.extend(chat.closing_ids(gen.token_ids), trained=False)
            continue
        traj.extend(nxt, trained=False)


def rollout(
    envs: Sequence[gym.Env],
    policy: Policy | ChatPolicy,
    chat: ChatTemplate,
    *,
    seeds: Sequence[int | None] | None = None,
    task_ids: Sequence[str | None] | None = None,
    sampling: SamplingParams = DEFAULT_SAMPLING,
    max_context_tokens: int = 4096,
    batch_tools: bool = True,
) -> list[Trajectory]:
    """Play one episode in each env, batching the policy's calls across envs.

    Args:
        envs: the envs (one episode each); pass the same ``task_id`` to all for a GRPO group.
        policy: samples turns from prompt ids, or a :class:`ChatPolicy` answering messages (its
            trajectories then hold turns but no token ids: for play, export and evaluation).
        chat: renders observations into token ids.
        seeds, task_ids: per-env ``reset`` seed and pinned task (None: the env's choice).
        sampling: sampling settings for every turn.
        max_context_tokens: an episode whose ids would exceed this is truncated.
        batch_tools: fetch each turn's tool calls of envs that share a backend in one batch
            (:mod:`prm_gym.envs.turn_batch`; the episodes are the same either way).
    """
    n = len(envs)
    seeds = list(seeds) if seeds is not None else [None] * n
    task_ids = list(task_ids) if task_ids is not None else [None] * n
    trajs: list[Trajectory] = []
    conversations: list[list[dict[str, Any]]] = []
    tools: list[list[dict[str, Any]]] = []
    for env, seed, tid in zip(envs, seeds, task_ids, strict=True):
        obs, info = env.reset(seed=seed, options={"task_id": tid} if tid is not None else None)
        traj = Trajectory(task_id=info["task_id"], prompt=obs, policy_version=policy.version, seed=seed)
        trajs.append(traj)
        if isinstance(policy, ChatPolicy):
            conversations.append([{"role": "system", "content": chat.system_prompt}, {"role": "user", "content": obs}])
            tools.append(list(info.get("tools", [])))
        else:
            traj.extend(chat.prompt_ids(obs, info.get("tools", [])), trained=False)
    if isinstance(policy, ChatPolicy):
        _play_chat(envs, trajs, policy, chat, conversations, tools, sampling, batch_tools)
    else:
        _play(envs, trajs, policy, chat, sampling, max_context_tokens, batch_tools)
    return trajs


def rollout_episodes(
    envs: Sequence[gym.Env],
    policy: Policy | ChatPolicy,
    chat: ChatTemplate,
    episodes: Sequence[tuple[str, int]],
    sampling: SamplingParams = DEFAULT_SAMPLING,
    max_context_tokens: int = 4096,
    batch_tools: bool = True,
) -> list[Trajectory]:
    """:func:`rollout` of ``(task_id, reset seed)`` episodes side by side, one per env (the first
    ``len(episodes)`` of ``envs``; tasks may differ, so sampling batches across them)."""
    return rollout(
        envs[: len(episodes)],
        policy,
        chat,
        seeds=[s for _, s in episodes],
        task_ids=[t for t, _ in episodes],
        sampling=sampling,
        max_context_tokens=max_context_tokens,
        batch_tools=batch_tools,
    )


def run_episode(
    env: gym.Env,
    policy: Policy | ChatPolicy,
    chat: ChatTemplate,
    *,
    seed: int | None = None,
    task_id: str | None = None,
    sampling: SamplingParams = DEFAULT_SAMPLING,
    max_context_tokens: int = 4096,
) -> Trajectory:
    """Play one episode (see :func:`rollout`)."""
    return rollout(
        [env], policy, chat, seeds=[seed], task_ids=[task_id], sampling=sampling, max_context_tokens=max_context_tokens
    )[0]


def continue_rollout(
    envs: Sequence[gym.Env],
    prefixes: Sequence[Trajectory],
    policy: Policy,
    chat: ChatTemplate,
    *,
    sampling: SamplingParams = DEFAULT_SAMPLING,
    max_context_tokens: int = 4096,
    batch_tools: bool = True,
) -> list[Trajectory]:
    """Continue episodes from a turn boundary (Tree-GRPO branching).

    Args:
        envs: envs positioned at the boundary, e.g. ``env.unwrapped.fork()`` of an episode
            that has taken exactly ``len(prefix.turns)`` turns (not finished).
        prefixes: for each env, the trajectory up to that boundary: its ``token_ids`` end with
            the observation after the last turn and the next generation prompt. They are
            copied, never modified; the returned trajectories share their prefix ids.
        policy, chat, sampling, max_context_tokens, batch_tools: as in :func:`rollout`.

    Returns:
        New trajectories: the prefix followed by freshly sampled turns.
    """
    trajs = [
        Trajectory(
            task_id=p.task_id,
            prompt=p.prompt,
            token_ids=list(p.token_ids),
            loss_mask=list(p.loss_mask),
            logprobs=list(p.logprobs),
            turns=list(p.turns),
            policy_version=policy.version,
            seed=p.seed,
        )
        for p in prefixes
    ]
    _play(envs, trajs, policy, chat, sampling, max_context_tokens, batch_tools)
    return trajs
