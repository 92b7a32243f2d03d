"""The env server: any registered env over HTTP, one env per session (``prm-serve``).

* :mod:`prm_gym.envs.serve.sessions`: the sessions, their locks and the idle reaper;
* :mod:`prm_gym.envs.serve.app`: the HTTP endpoints (FastAPI) and :func:`serve_in_thread`;
* :mod:`prm_gym.envs.serve.cli`: the ``prm-serve`` command;
* :mod:`prm_gym.envs.serve.wire`: env values as JSON (NumPy scalars, non-finite floats);
* :mod:`prm_gym.envs.serve.worker`: env calls in worker processes, killed past their deadline;
* :mod:`prm_gym.envs.serve.auth`: the token and the sessions' owners;
* :mod:`prm_gym.envs.serve.limits`: body size, body-read deadline, JSON shape, kwarg bounds;
* :mod:`prm_gym.envs.serve.errors`: the HTTP error type.

The client is :class:`prm_gym.envs.remote.RemoteEnv`. FastAPI and uvicorn come with the
``serve`` extra; the client needs only httpx.
"""
