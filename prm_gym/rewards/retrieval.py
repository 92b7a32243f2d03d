"""``rule/retrieval``: a per-turn retrieval reward for search envs.

=====================  =========  ======  =================================================
id                     term       scope   score
=====================  =========  ======  =================================================
``rule/retrieval``     retrieval  turn    the fraction of the task's gold passages first
                                          retrieved on this turn, in [0, 1]
=====================  =========  ======  =================================================

Gold passages come from ``task.meta["gold_ids"]`` (passage ids) or ``["gold_titles"]``
(HotpotQA supporting-fact titles). A task with neither scores 1.0 on the first turn whose
passages contain a gold answer (SQuAD-normalised, on word boundaries). Only passages new to
the episode count, so repeating a search earns nothing; summed over an episode the score is at
most 1. Passages are read from the env's own tool output (``Doc i [id=...] Title: ...``
header lines, see :func:`prm_gym.envs.search.env.format_passages`), never from the agent's text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from prm_gym.rewards.protocol import TurnJudge
from prm_gym.rewards.rule import gold_answers, normalize_answer
from prm_gym.rewards.types import Turn, Verdict

_HEADER_RE = re.compile(r"^Doc \d+ \[id=([^\]\n]*)\] Title: (.*)$", re.MULTILINE)
_NO_PASSAGES = Verdict(0.0, detail="no passages")  # frozen: one shared instance


def retrieved(outputs: Iterable[str]) -> tuple[set[str], set[str]]:
    """Passage ids and titles listed in search tool outputs."""
    ids: set[str] = set()
    titles: set[str] = set()
    for text in outputs:
        for m in _HEADER_RE.finditer(text):
            ids.add(m.group(1))
            titles.add(m.group(2).strip())
    return ids, titles


def _contains_answer(texts: Iterable[str], answers: Sequence[str]) -> bool:
    blob = f" {normalize_answer(' '.join(texts))} "
    return any(f" {normalize_answer(a)} " in blob for a in answers if normalize_answer(a))


class RetrievalJudge(TurnJudge):
    """Rewards a turn for the gold passages it retrieved first (see the module docstring)."""

    name = "rule/retrieval"
    term = "retrieval"
    scope = "turn"
    memoize = False  # cheap and deterministic: recomputing beats hashing the turn and its history

    def score_one(self, turn: Turn) -> Verdict:
        now = [r.output for r in turn.tool_results if r.ok]
        if not now:
            return _NO_PASSAGES
        before = [obs for _, obs in turn.history]
        meta = turn.task.meta
        for key, pos in (("gold_ids", 0), ("gold_titles", 1)):
            gold = {str(g) for g in meta.get(key) or ()}
            if gold:
                new = retrieved(now)[pos] - retrieved(before)[pos]
                hit = len(gold & new)
                return Verdict(hit / len(gold), detail=f"{hit}/{len(gold)} new gold passages")
        answers = gold_answers(turn.task.answer)
        if _contains_answer(now, answers) and not _contains_answer(before, answers):
            return Verdict(1.0, detail="answer first retrieved")
        return Verdict(0.0)
