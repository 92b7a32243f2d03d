"""RemoteEnv: a ``gymnasium.Env`` played on a ``prm-serve`` env server.

::

    from prm_gym.envs.remote import RemoteEnv
    env = RemoteEnv("http://gpu-box:8000", env_kwargs={"split": "test"})
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("<answer>42</answer>")
    env.close()

Each ``RemoteEnv`` holds one server session (made in the constructor, deleted by :meth:`close`).
Every call has ONE total deadline (``timeout_s``) covering connecting, reading and retries; only
a request that never reached the server (a refused connection) is retried.

Failures, by who caused them (docs/contract.md, "Failures and verdicts"):

* the server failed during a ``step`` (a 502-504: its env's backend is down, its worker died or
  ran past the call deadline, the server is full; or no answer within the deadline; or the session
  expired): the turn comes back with reward 0, every term 0, ``info["reward_status"] =
  "infra_error"`` and ``truncated=True`` (the episode cannot go on), never an exception into the
  trainer's rollout;
* the env behind the server raised something that is not an infrastructure failure (prm-serve's
  500: a bug such as a ``TypeError`` in a judge): :class:`RemoteEnvError` with status 500, raised
  as the same env would raise locally, so a bug fails the run instead of being excluded as
  ``infra_error`` (the server has closed the session; the next ``reset`` starts another);
* the server failed while making a session or resetting: :class:`RemoteEnvUnavailable` (an
  :class:`~prm_gym.core.errors.InfraError`; a rollout worker drops the group);
* the client sent something wrong (a 4xx): :class:`RemoteEnvError` with the server's reason;
  stepping a finished episode raises ``gymnasium.error.ResetNeeded``, as a local env does.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from typing import Any

import gymnasium as gym
import httpx

from prm_gym.core.errors import ConfigError, InfraError, PRMError
from prm_gym.core.seams import RewardKind
from prm_gym.core.spaces import UnicodeText
from prm_gym.core.tasks import Task, TaskSet
from prm_gym.envs.serve.auth import CLIENT_HEADER, TOKEN_ENV
from prm_gym.envs.serve.wire import dumps, from_wire
from prm_gym.rewards.combine import JudgeSpec, parse_judge_spec


class RemoteEnvError(PRMError):
    """The env server refused a request the client made (a 4xx), or the env behind it raised
    something that is not an infrastructure failure (500, a bug); the message is the server's."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"env server answered {status}: {reason}")
        self.status = status


class RemoteEnvUnavailable(InfraError):
    """The env server failed, did not answer within the deadline, or could not be reached."""


def remote_tasks(records: list[dict[str, Any]], name: str) -> TaskSet:
    """The ids and public metadata (``level``, ``env``) of a remote session's tasks, as a
    :class:`TaskSet` whose tasks have an empty prompt and no answer: the server keeps prompts and
    gold data to itself."""
    return TaskSet([Task(str(r["id"]), "", None, dict(r.get("meta") or {})) for r in records], name=name)


class RemoteEnv(gym.Env[str, str]):
    """One session of a ``prm-serve`` server, as a ``gymnasium.Env[str, str]``.

    Args:
        url: the server's base URL, e.g. ``http://localhost:8000``.
        env_id: if given, the id the server must serve (a :class:`RemoteEnvError` otherwise).
        env_kwargs: keyword arguments the server applies to this session's env (only the keys
            its ``--allow-kwargs`` names, e.g. ``split``, ``levels``, ``num_tasks``, ``task_seed``).
        timeout_s: the total deadline of each call: connecting, reading and retries.
        token: the server's token (default: ``$PRM_SERVE_TOKEN``); needed when it serves beyond loopback.

    Each ``RemoteEnv`` sends a random client key of its own: its sessions (and their forks)
    answer only it.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        url: str,
        *,
        env_id: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        timeout_s: float = 60.0,
        token: str | None = None,
        _session: dict[str, Any] | None = None,
        _client_key: str | None = None,
    ):
        if timeout_s <= 0:
            raise ConfigError(f"RemoteEnv timeout_s must be positive, got {timeout_s}.")
        self.url = url.rstrip("/")
        self.env_kwargs = dict(env_kwargs or {})
        self.timeout_s = timeout_s
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self._client_key = _client_key or secrets.token_urlsafe(24)
        self._headers = {CLIENT_HEADER: self._client_key}
        if self.token:
            self._headers["authorization"] = f"Bearer {self.token}"
        self._http = httpx.Client(base_url=self.url, headers=self._headers)
        self._closed = False
        self._sid: str | None = None
        self._done = True
        self._turn = 0
        self._task_id = ""
        self._tasks: TaskSet | None = None
        try:
            desc = _session or self._request("POST", "/sessions", {"env": env_id, "env_kwargs": self.env_kwargs})
        except BaseException:
            self._http.close()
            raise
        self._adopt(desc)

    def _adopt(self, desc: dict[str, Any]) -> None:
        self._sid = str(desc["session_id"])
        self.env_id = str(desc["env"])
        self.tool_schemas: list[dict[str, Any]] = list(desc.get("tools", []))
        self.reward_terms: list[str] = list(desc.get("reward_terms", []))
        #: Each term's kind (outcome or process) as the served env's judges declare it.
        self.reward_kinds: dict[str, RewardKind] = dict(desc.get("reward_kinds", {}))
        self.judge_spec: JudgeSpec | None = parse_judge_spec(desc["judge"]) if desc.get("judge") else None
        self.action_space = UnicodeText(int(desc["max_action_chars"]))
        self.observation_space = UnicodeText(int(desc["max_observation_chars"]))

    # ----------------------------------------------------------------- HTTP
    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One call under one total deadline; a 4xx or prm-serve's 500 (the env raised, a bug) raises
        :class:`RemoteEnvError`; a 502-504, a timeout or an unreachable server :class:`RemoteEnvUnavailable`."""
        deadline = time.monotonic() + self.timeout_s
        content = dumps(body) if body is not None else None
        headers = {"content-type": "application/json"} if content is not None else None
        delay = 0.05
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RemoteEnvUnavailable(f"{method} {self.url}{path}: no answer within {self.timeout_s}s")
            try:
                with self._http.stream(method, path, content=content, headers=headers, timeout=left) as r:
                    raw = bytearray()
                    for chunk in r.iter_bytes():
                        raw += chunk
                        if time.monotonic() > deadline:
                            raise httpx.ReadTimeout("the total deadline passed while reading")
                    status = r.status_code
                break
            except httpx.ConnectError as exc:  # never reached the server: safe to retry
                if deadline - time.monotonic() <= delay:
                    raise RemoteEnvUnavailable(f"{method} {self.url}{path}: cannot connect ({exc})") from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except httpx.HTTPError as exc:
                raise RemoteEnvUnavailable(f"{method} {self.url}{path}: {type(exc).__name__}: {exc}") from exc
        try:
            payload = from_wire(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RemoteEnvUnavailable(f"{method} {self.url}{path}: answer {status} is not JSON ({exc})") from exc
        if not isinstance(payload, dict):
            raise RemoteEnvUnavailable(f"{method} {self.url}{path}: answer {status} is not a prm-serve JSON object")
        if status == 500:  # prm-serve's answer when the env raised what is not an InfraError (a bug)
            raise RemoteEnvError(status, str(payload.get("error", payload)))
        if status > 500:
            raise RemoteEnvUnavailable(f"env server answered {status}: {payload.get('error', payload)}")
        if status >= 400:
            raise RemoteEnvError(status, str(payload.get("error", payload)))
        return dict(payload)

    def _session_path(self, what: str) -> str:
        if self._closed:
            raise gym.error.Error("the RemoteEnv is closed; make a new one.")
        return f"/sessions/{self._sid}/{what}"

    # ----------------------------------------------------------------- gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self._sid is None:  # the last session ended in a failure: start a new one
            self._adopt(self._request("POST", "/sessions", {"env": self.env_id, "env_kwargs": self.env_kwargs}))
        body = {"seed": seed, "options": options}
        try:
            out = self._request("POST", self._session_path("reset"), body)
        except RemoteEnvError as exc:
            if exc.status != 404:
                raise
            # the session expired after idling: start a new one, once
            self._adopt(self._request("POST", "/sessions", {"env": self.env_id, "env_kwargs": self.env_kwargs}))
            out = self._request("POST", self._session_path("reset"), body)
        info = dict(out["info"])
        self._done, self._turn, self._task_id = False, 0, str(info.get("task_id", ""))
        return str(out["observation"]), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise gym.error.ResetNeeded("The episode is over (or never started); call reset().")
        try:
            out = self._request("POST", self._session_path("step"), {"action": action})
        except RemoteEnvUnavailable as exc:
            return self._failed_turn(str(exc))
        except RemoteEnvError as exc:
            if exc.status == 404:  # the session expired: not the agent's doing
                return self._failed_turn(str(exc))
            if exc.status == 409:
                self._done = True
                raise gym.error.ResetNeeded(str(exc)) from exc
            if exc.status == 500:  # the env raised (a bug); the server closed the session
                self._done = True
                self._drop_session(wait=False)
            raise
        self._turn += 1
        terminated, truncated = bool(out["terminated"]), bool(out["truncated"])
        self._done = terminated or truncated
        return str(out["observation"]), float(out["reward"]), terminated, truncated, dict(out["info"])

    def _failed_turn(self, reason: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The turn the server could not play: scored nothing, flagged infra_error, episode truncated."""
        self._turn += 1
        self._done = True
        self._drop_session(wait=False)
        info: dict[str, Any] = {f"reward_{term}": 0.0 for term in self.reward_terms}
        info.update(
            reward_status="infra_error",
            task_id=self._task_id,
            turn=self._turn,
            answer="",
            judge={},
            remote={"error": reason[:2000]},
        )
        return "The environment server failed; this episode ends here.", 0.0, False, True, info

    def _drop_session(self, wait: bool = True) -> None:
        """Forget the session and delete it on the server, briefly (the server's idle reaper
        closes it if it cannot be reached); ``wait=False`` deletes it from a background thread,
        so a failed step returns within its deadline."""
        sid, self._sid = self._sid, None
        if sid is None:
            return
        url, timeout = f"{self.url}/sessions/{sid}", min(2.0, self.timeout_s)
        if wait:
            with contextlib.suppress(httpx.HTTPError):
                self._http.delete(url, timeout=timeout)
            return
        threading.Thread(
            target=_delete_quietly, args=(url, timeout, self._headers), name="prm-remote-drop", daemon=True
        ).start()

    @property
    def tasks(self) -> TaskSet:
        """The session's task ids and public metadata (fetched once)."""
        if self._tasks is None:
            if self._sid is None:
                self._adopt(self._request("POST", "/sessions", {"env": self.env_id, "env_kwargs": self.env_kwargs}))
            records = list(self._request("GET", self._session_path("tasks"))["tasks"])
            self._tasks = remote_tasks(records, f"tasks of {self.url}")
        return self._tasks

    def fork(self) -> RemoteEnv:
        """A new session at this one's turn boundary (the server forks its env)."""
        desc = self._request("POST", self._session_path("fork"))
        clone = RemoteEnv(
            self.url,
            env_kwargs=self.env_kwargs,
            timeout_s=self.timeout_s,
            token=self.token,
            _session=desc,
            _client_key=self._client_key,
        )
        clone._done, clone._turn, clone._task_id, clone._tasks = self._done, self._turn, self._task_id, self._tasks
        return clone

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._drop_session()
        finally:
            self._http.close()
            super().close()


def _delete_quietly(url: str, timeout: float, headers: dict[str, str]) -> None:
    with contextlib.suppress(httpx.HTTPError):
        httpx.delete(url, timeout=timeout, headers=headers)
