"""Guards against reward hacking of LLM judges, applied before the judge model is asked.

LLM judges are known to give high scores to "master key" responses (Zhao et al., 2025, *One
Token to Fool LLM-as-a-Judge*): empty or near-empty answers, bare reasoning openers ("Let's
solve this step by step", "Thought process:", "解"), lone punctuation, answers that only restate
the question (in its language or another), text imitating the env's markup or a verdict
("Score: 10", fake ``<tool_response>`` blocks) and over-long answers. :func:`check` names the
first guard a response trips, or returns None; the LLM judge then gives the minimum score
without calling the model. Guards are on by default for LLM judges (``guards=False`` to disable).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from prm_gym.core.errors import ConfigError

#: Openers that carry no content on their own, in several languages (lower-cased, no punctuation).
REASONING_OPENERS: tuple[str, ...] = (
    "let's solve this step by step",
    "let's solve this problem step by step",
    "let's think step by step",
    "let me think step by step",
    "let me think",
    "let me solve this",
    "thought process",
    "reasoning",
    "solution",
    "answer",
    "step 1",
    "first",
    "okay",
    "sure",
    "解",
    "解答",
    "答案",
    "思考过程",
    "让我们一步一步地思考",
    "solución",
    "lösung",
    "réponse",
    "решение",
)

_MARKUP_RE = re.compile(
    r"(?i)</?(tool_response|tool_result|observation|reward|score|verdict|system|judge)\b[^>]*>"
    r"|<\|im_start\|>|<\|im_end\|>|\[\[\s*\d+(\.\d+)?\s*\]\]"
    r"|\b(score|rating|grade|verdict|reward|judgement|judgment)\s*[:=]\s*\[?\s*-?\d"
    r"|\"(score|rating|verdict|reward)\"\s*:"
    r"|\b(final verdict|the answer is correct|this answer is correct|correct answer: yes)\b"
)
_TAG_RE = re.compile(r"</?[A-Za-z_][A-Za-z0-9_]*>")
_WORD_RE = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class GuardConfig:
    """Which guards run, and their thresholds.

    Attributes:
        min_content_chars: fewer letters/digits than this (markup removed) is "near-empty".
        max_chars: longer responses are "over-long".
        openers: reject responses that are only a reasoning opener.
        markup: reject imitations of the env's markup or of a verdict.
        restatement: reject responses whose words all come from the question.
        foreign_script: reject short responses in another script than the question.
    """

    min_content_chars: int = 1
    max_chars: int = 8000
    openers: bool = True
    markup: bool = True
    restatement: bool = True
    foreign_script: bool = True

    def __post_init__(self) -> None:
        if self.min_content_chars < 0 or self.max_chars < 1:
            raise ConfigError("GuardConfig: min_content_chars must be >= 0 and max_chars >= 1.")


def _content(text: str) -> str:
    """Letters and digits of ``text`` with tags removed."""
    return "".join(ch for ch in _TAG_RE.sub(" ", text) if ch.isalnum())


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", _TAG_RE.sub(" ", text)).lower()
    text = "".join(ch if ch.isalnum() or ch in "' " else " " for ch in text)
    return " ".join(text.split())


def _script(text: str) -> str | None:
    """The dominant script of ``text``'s letters ("LATIN", "CJK", "CYRILLIC", ...), or None."""
    counts: dict[str, int] = {}
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            key = "CJK" if name.startswith(("CJK", "HIRAGANA", "KATAKANA", "HANGUL")) else name.split(" ")[0]
            counts[key] = counts.get(key, 0) + 1
    return max(counts, key=lambda k: counts[k]) if counts else None


def _restates(answer: str, question: str) -> bool:
    words = _WORD_RE.findall(_normalise(answer))
    if not words or not question:
        return False
    qwords = set(_WORD_RE.findall(_normalise(question)))
    return len(words) >= 3 and all(w in qwords for w in words)


def check(text: str, question: str = "", config: GuardConfig | None = None) -> str | None:
    """The name of the first guard ``text`` trips, or None when it may be judged.

    Args:
        text: the agent's response (or answer) the judge would see.
        question: the task prompt, for the restatement and script checks.
        config: thresholds and switches; defaults to :class:`GuardConfig`.

    Returns:
        ``"over_long"``, ``"markup"``, ``"empty"``, ``"punctuation"``, ``"opener"``,
        ``"restatement"`` or ``"foreign_script"``; None when no guard trips.
    """
    cfg = config or GuardConfig()
    if len(text) > cfg.max_chars:
        return "over_long"
    if cfg.markup and _MARKUP_RE.search(text):
        return "markup"
    content = _content(text)
    if not text.strip():
        return "empty"
    if not content:
        return "punctuation"
    if len(content) < cfg.min_content_chars:
        return "empty"
    if cfg.openers and _normalise(text) in REASONING_OPENERS:
        return "opener"
    if cfg.restatement and _restates(text, question):
        return "restatement"
    if cfg.foreign_script and question:
        qs, ts = _script(question), _script(text)
        if qs and ts and qs != ts and len(content) < 40:
            return "foreign_script"
    return None
