"""Construction rows of bench_envs.py: our ``gym.make`` against each peer's env class, and every prm/
id against issue 25's goal of 0.5 ms; passes alternated with the peers' like every other row."""

from __future__ import annotations

import gymnasium as gym
from peer_client import PeerSession
from result_line import emit, median, per_call_us, spread

import prm_gym

PEERS = {"gem": "GEM", "skyrl": "skyrl-gym"}


def make_pass(env_id: str, n: int = 200) -> float:
    """Mean microseconds of ``gym.make(env_id)`` with default arguments (after the first build)."""
    return per_call_us(lambda: gym.make(env_id).close(), n)


def construction(env_id: str, peers: dict[str, PeerSession | str], reps: int) -> None:
    """Construction rows: our gym.make against each peer's env class, passes alternated."""
    gym.make(env_id).close()  # the first build generates the task set once per process
    ours: list[float] = []
    theirs: dict[str, list[float]] = {p: [] for p in peers}
    for rep in range(reps + 1):
        t = make_pass(env_id)
        if rep:
            ours.append(t)
        for peer, session in peers.items():
            if isinstance(session, PeerSession) and not session.error:
                reply = session.ask("construct")
                if rep and "construct_us" in reply:
                    theirs[peer].append(reply["construct_us"])
    what = "gym.make, default arguments, after the first build"
    for peer, times in theirs.items():
        session = peers[peer]
        if not times or not isinstance(session, PeerSession):
            continue
        base = f"{PEERS[peer]} {session.hello.get('version', '')} {session.hello.get('env', '')} constructor"
        o, t = median(ours), median(times)
        print(f"{env_id:<14} {what:<62} ours {o:8.1f} us  {base:<26} {t:8.1f} us  {t / o:5.2f}x")
        note = (
            "ours goes through gym.make (registry lookup, the env checker, order and time-limit wrappers) and "
            "builds the judges and tool schemas; the peer constructs its class with its task given"
            if t < o
            else ""
        )
        cond = "ours gym.make with its wrappers (what a trainer calls), theirs the class; passes alternated"
        emit(
            "envs",
            f"{env_id} {what}",
            o,
            t,
            f"{base}; {cond}",
            "us",
            "lower",
            f"ours {spread(ours)}, {PEERS[peer]} {spread(times)}",
            note,
        )


def construction_goal(reps: int) -> None:
    """Every prm/ id's gym.make against issue 25's goal of 0.5 ms (a target, not a measured peer)."""
    for env_id in sorted(prm_gym.ENVS):
        gym.make(env_id).close()
        times = [make_pass(env_id, 100) for _ in range(reps)]
        print(f"{env_id:<14} gym.make after the first build: {median(times):.1f} us (goal <= 500 us)")
        emit(
            "envs", f"{env_id} gym.make, default arguments, after the first build", median(times), 500.0,
            "the 0.5 ms goal (a target, not a measurement)", "us", "lower", spread(times),
        )  # fmt: skip
