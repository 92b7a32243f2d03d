"""Isolated code execution: one protocol, bubblewrap by default, a warm pool, Docker and an
explicitly unsandboxed fallback. ``make_sandbox("bwrap-pool")`` is the usual entry point."""

from __future__ import annotations

from prm_gym.sandbox.protocol import BACKENDS, Sandbox, make_sandbox
from prm_gym.sandbox.types import ExecResult, Limits

__all__ = ["BACKENDS", "ExecResult", "Limits", "Sandbox", "make_sandbox"]
