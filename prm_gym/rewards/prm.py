"""Discriminative process reward models on transformers, loaded from a local directory.

``prm/discriminative`` scores the steps of a turn with a PRM checkpoint the user gives:

* ``mode="separator"`` (the Qwen2.5-Math-PRM convention): the solution so far is written as
  the assistant message with a separator token (``<extra_0>``) after every step; the model
  returns two logits per token and a step's score is the softmax probability of the positive
  label at its separator. Loaded with ``AutoModelForTokenClassification`` (or, with
  ``trust_remote_code=True``, ``AutoModel`` as the Qwen checkpoints need).
* ``mode="classifier"``: a sequence-classification head scores the text up to the end of the
  turn (softmax of the positive label, or a sigmoid for a one-logit head).

Steps are the earlier turns' actions (one step each) and this turn's action split on
``step_split``; the turn's score aggregates this turn's step scores (``min`` by default, the
PURE view of a solution being only as good as its worst step). Score range: [0, 1].
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prm_gym.core.errors import ConfigError, JudgeError
from prm_gym.rewards.protocol import Scope
from prm_gym.rewards.types import Turn, Verdict

QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
_AGGREGATES: dict[str, Callable[[list[float]], float]] = {
    "min": min,
    "max": max,
    "last": lambda xs: xs[-1],
    "mean": lambda xs: sum(xs) / len(xs),
}


class DiscriminativePRM:
    """A PRM checkpoint as a batched judge (term ``process``, scope ``turn``).

    Args:
        path: a local directory with the model and tokenizer (nothing is downloaded).
        mode: ``"separator"`` or ``"classifier"``.
        step_separator: the token marking the end of a step (separator mode).
        step_split: the string that splits one turn into steps.
        positive_label: index of the "good step" label.
        aggregate: ``"min"``, ``"mean"``, ``"last"`` or ``"max"`` over this turn's steps.
        batch_size: turns per forward pass.
        system_prompt: the system message of the PRM's chat template (None for none).
        trust_remote_code: load custom model code shipped in ``path`` (Qwen2.5-Math-PRM).
        device: ``"cpu"`` or a CUDA device.
    """

    term = "process"
    scope: Scope = "turn"

    def __init__(
        self,
        path: str,
        mode: str = "separator",
        step_separator: str = "<extra_0>",
        step_split: str = "\n\n",
        positive_label: int = 1,
        aggregate: str = "min",
        batch_size: int = 8,
        system_prompt: str | None = QWEN_PRM_SYSTEM,
        trust_remote_code: bool = False,
        device: str = "cpu",
        name: str = "prm/discriminative",
    ):
        if mode not in ("separator", "classifier") or aggregate not in _AGGREGATES or batch_size < 1:
            raise ConfigError("prm: mode must be separator|classifier, aggregate min|mean|last|max, batch_size >= 1.")
        if not Path(path).is_dir():
            raise ConfigError(f"prm: path {path!r} is not a local directory with a PRM checkpoint.")
        import transformers

        self.name, self.mode, self.step_split = name, mode, step_split
        self.sep, self.positive, self.aggregate = step_separator, positive_label, aggregate
        self.batch_size, self.system_prompt, self.device = batch_size, system_prompt, device
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        auto: Any
        if mode == "separator":
            auto = transformers.AutoModel if trust_remote_code else transformers.AutoModelForTokenClassification
            self.sep_id = self.tokenizer.convert_tokens_to_ids(step_separator)
            if self.sep_id is None or self.sep_id == self.tokenizer.unk_token_id:
                raise ConfigError(f"prm: the tokenizer in {path!r} has no separator token {step_separator!r}.")
        else:
            auto = transformers.AutoModelForSequenceClassification
        self.model = auto.from_pretrained(path, trust_remote_code=trust_remote_code).to(device).eval()

    def text(self, turn: Turn) -> tuple[str, int]:
        """The PRM's input for ``turn`` and how many of its steps belong to this turn."""
        own = [s.strip() for s in turn.action.split(self.step_split) if s.strip()] or [turn.action.strip() or "(empty)"]
        steps = [a.strip() or "(empty)" for a, _ in turn.history] + own
        sep = self.sep if self.mode == "separator" else "\n\n"
        answer = sep.join(steps) + (self.sep if self.mode == "separator" else "")
        messages = [{"role": "user", "content": turn.task.prompt}, {"role": "assistant", "content": answer}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        if getattr(self.tokenizer, "chat_template", None):
            rendered = str(self.tokenizer.apply_chat_template(messages, tokenize=False))
        else:
            rendered = "\n\n".join(m["content"] for m in messages)
        return rendered, len(own)

    def score(self, turns: Sequence[Turn]) -> list[Verdict]:
        out: list[Verdict] = []
        for i in range(0, len(turns), self.batch_size):
            out += self._score_batch(turns[i : i + self.batch_size])
        return out

    def _score_batch(self, turns: Sequence[Turn]) -> list[Verdict]:
        import torch

        start = time.perf_counter()
        texts, owns = zip(*(self.text(t) for t in turns), strict=True)
        self.tokenizer.padding_side = "right"
        enc = self.tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        with torch.no_grad():
            out = self.model(**enc)
        logits = (out.logits if hasattr(out, "logits") else out[0]).float()
        latency = (time.perf_counter() - start) / len(turns)
        verdicts = []
        for b, own in enumerate(owns):
            if self.mode == "separator":
                positions = (enc["input_ids"][b] == self.sep_id).nonzero().flatten().tolist()
                if len(positions) < own:
                    raise JudgeError(f"{self.name}: input was cut; found {len(positions)} separators, need {own}.")
                probs = torch.softmax(logits[b, positions[-own:]], dim=-1)[:, self.positive].tolist()
            else:
                row = logits[b]
                probs = [float(torch.sigmoid(row[0]) if row.numel() == 1 else torch.softmax(row, -1)[self.positive])]
            value = float(_AGGREGATES[self.aggregate](probs))
            tokens = int(enc["attention_mask"][b].sum())
            detail = ",".join(f"{p:.3f}" for p in probs)
            verdicts.append(Verdict(value, latency_s=latency, tokens=tokens, detail=detail))
        return verdicts
