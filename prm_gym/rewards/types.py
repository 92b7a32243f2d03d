"""The records judges consume and produce: :class:`Turn` in, :class:`Verdict` out."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import NamedTuple

from prm_gym.core.parsing import ParsedAction
from prm_gym.core.tasks import Task
from prm_gym.core.tools import ToolResult


class Turn(NamedTuple):
    """Everything a judge may look at for one agent turn (an immutable named tuple: the env
    builds one every step, and a named tuple is several times cheaper to build than a frozen
    dataclass).

    Attributes:
        task: the episode's task (prompt and gold answer).
        index: 0-based turn number.
        action: the agent's raw text for this turn.
        parsed: the parse of ``action``.
        tool_results: what the tools returned this turn.
        history: earlier ``(action, observation)`` pairs of the episode.
        final: True when this turn ended the task (an answer was submitted).
    """

    task: Task
    index: int  # type: ignore[assignment]  # the turn number; shadows tuple.index on purpose
    action: str
    parsed: ParsedAction
    tool_results: tuple[ToolResult, ...] = ()
    history: tuple[tuple[str, str], ...] = ()
    final: bool = False

    @property
    def answer(self) -> str | None:
        return self.parsed.answer

    def content_hash(self) -> str:
        """A hash of everything that determines a verdict; keys the verdict memo."""
        payload = json.dumps(
            [
                self.task.id,
                self.task.prompt,
                repr(self.task.answer),
                self.index,
                self.action,
                [(r.name, r.ok, r.output) for r in self.tool_results],
                self.history,
                self.final,
            ],
            ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Verdict:
    """One judge's score for one turn.

    Attributes:
        score: the score, in the range the judge documents; always finite.
        latency_s: seconds the judgement took, for judges that call a model or a server.
        tokens: model tokens the judgement used, when known.
        detail: a short human-readable explanation.
        unusable: the judge's model answered, but its verdict could not be read (the score is then the
            minimum): counted per judge in training metrics (``judge/<name>/unusable``).
    """

    score: float
    latency_s: float | None = None
    tokens: int | None = None
    detail: str = field(default="", compare=False)
    unusable: bool = field(default=False, compare=False)

    def as_info(self) -> dict[str, float | int | str]:
        out: dict[str, float | int | str] = {"score": float(self.score)}
        if self.latency_s is not None:
            out["latency_s"] = float(self.latency_s)
        if self.tokens is not None:
            out["tokens"] = int(self.tokens)
        if self.unusable:
            out["unusable"] = 1
        return out
