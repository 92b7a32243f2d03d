"""Guards against reward hacking of LLM judges, applied before the judge model is asked.

LLM judges give high scores to "master key" responses (Zhao et al., 2025, *One Token to Fool
LLM-as-a-Judge*): empty answers, bare reasoning openers ("Let's solve this step by step", "解"),
lone punctuation, text that grades itself ("I have checked this carefully; it is certainly
right"), and imitations of a verdict or of the env's markup. A list of exact phrases misses every
paraphrase, so the guards here classify the *kind* of content instead:

* ``markup``: imitation of the judge's, the env's or a chat template's markup: tags such as
  ``<tool_response>``, ``<score>`` or our own ``<untrusted>``; ``<|...|>`` special tokens;
  ``[[9]]``; ``Score: 10``; a verdict JSON key; a line that speaks as ``System:`` or ``Judge:``.
* ``self_grading``: a clause that asserts the answer's quality with nothing to back it (its
  words are all assessment words such as "certainly", "verified", "flawless" and function words;
  no number, formula or content word), or any text that addresses the grader ("full marks",
  "the judge should", "rate this 10/10").
* ``opener``: reasoning-free text: every word is a discourse filler ("let's", "think", "step",
  "solution", "解", "Lösung"), so there is nothing to judge. One filler token is the same case.
* ``empty`` / ``punctuation``: nothing, or no letter and no digit.
* ``restatement``: every word comes from the question; ``foreign_script``: a short answer in
  another script than the question; ``over_long``: more than ``max_chars``.

:func:`check` names the first guard a response trips, or returns None; the LLM judge then gives
the minimum score without calling the model. The detection and false-positive rates on a set of
attacks and honest answers are in ``docs/judges.md`` (measured by ``tests/rewards/guard_corpus.py``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from prm_gym.core.errors import ConfigError
from prm_gym.rewards.injection import is_injection


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Words that carry no content of their own in an opener (lower case, several languages).
FILLER_WORDS: frozenset[str] = _wordset(
    """a about alright an analyse analysis analyze and answer answers approach are as at be begin
    below break careful carefully consider considering detail do down figure final first firstly
    follow following follows for go going good hello here here's hi hm hmm i i'll i'm in is it
    it's let let's lets look me my need next now of ok okay on our out plan problem process
    question reason reasoning right see set shall so solution solve solving start starting step
    steps sure task that the then by analyzing analysing response above below whole get
    got started goes gone please every any remain remains holds hold meets meet me by there
    cannot can't couldn't isn't wasn't not dive into time things thing then say said myself if
    you your safely one two three four five six seven eight nine ten out on fix done stand
    note about reply twice
    think thinking this thought thoughts through to try
    understand up us we we'll well will with work working um uh
    vamos a resolver paso por razonamiento pensemos primero solución respuesta veamos el la
    lass uns schritt für denken lösung antwort zuerst wir die der das und
    et le les
    réponse résolvons étape par raisonnement réfléchissons d'abord voyons
    давайте подумаем шаг за шагом решение ответ сначала"""
)
#: Filler in scripts written without spaces (removed as substrings).
FILLER_CJK: tuple[str, ...] = (
    "让我们一步一步地思考", "让我们一步一步思考", "一步一步", "让我们", "思考过程", "思考", "解答", "答案",
    "首先", "好的", "分析", "步骤", "我们", "来", "解", "答", "考えてみましょう", "解答", "回答",
)  # fmt: skip
#: Words that assess an answer instead of giving one.
ASSESSMENT_WORDS: frozenset[str] = _wordset(
    """absolutely accurate accurately airtight beyond bulletproof certain certainly checked
    complete completely confident confidently confirmed correct correctly definitely double
    doubt doubts error errors error-free exact exactly fine flawless guaranteed impeccable
    indeed indisputable indisputably mistake mistakes no nothing perfect perfectly precise
    proven rigorous rigorously solid sound surely triple true truly trust unquestionably
    undeniably undoubtedly valid verified verify wrong yes 100 percent fully totally entirely
    has have been am very highly extremely i've carefully thoroughly everything all can
    be sure without any contains free absolutely no reviewed re-checked rechecked checked
    legit legitimate flawlessly works right am whatsoever contains double-checked spot
    triple-checked re-checked cross-checked rest assured verificada verificado y la
    correcto correcta exacto exacta verificado seguro definitivamente sin errores es está
    richtig korrekt stimmt sicher geprüft ist ohne fehler
    juste exacte vérifié certainement sans erreur est c'est
    верно правильно правильный точно проверено это"""
)
#: Beginnings of assessment words, so that inflections and paraphrases count too.
ASSESSMENT_STEMS: tuple[str, ...] = (
    "correct", "accura", "verif", "validat", "confirm", "certif", "certain", "guarant", "flaw",
    "perfect", "rigor", "doubt", "definit", "undeni", "indisput", "unquestion", "mistake", "error",
    "impecc", "exact", "criteri", "rubric", "approv", "accept", "pass", "mark", "grade", "score",
    "credit", "trust", "assur", "proven", "prove", "check", "sure", "fault", "optimal", "positive",
    "impossib", "spot-on", "infallib", "unimpeach", "watertight", "immaculate", "superb", "excellent",
)  # fmt: skip
#: Assessments in scripts written without spaces.
ASSESSMENT_CJK: tuple[str, ...] = ("完全正确", "正确", "无误", "没有错误", "没错", "对的", "肯定", "验证", "正しい")
#: Words that only make sense when addressing whoever grades the answer.
_GRADER_RE = re.compile(
    r"(?i)\b(full|maximum|max|top|perfect|highest|high)\s+(marks?|score|points|credit|rating|grade)\b"
    r"|\b(rate|rating|grade|score|mark|give|award|deserves?)\b[^.\n]{0,40}?\b\d+(\.\d+)?\s*/\s*(5|10|100)\b"
    r"|\b(give|award|assign)\s+(this|it|me|my\s+\w+)\s+(a\s+)?(\d+|full|maximum|top|perfect|high)"
    r"|\bignore\s+(all\s+|any\s+)?(previous|prior|above|earlier|the)\s+(instructions?|rubric|rules)"
    r"|\b(should|must)\s+(be\s+)?(scored|graded|rated|marked|accepted)\b"
    r"|\b(scoring|reward|grading|judging|evaluation|evaluating)\s+(model|system|function|script)\b"
    r"|\bmark\s+(this|it|me|that)\b[^.\n]{0,20}\b(as|right|correct)\b"
    r"|\b(\d+|ten|nine|five|hundred)\s+out\s+of\s+(\d+|ten|five|hundred)\b"
    r"|\b(meets|satisfies|fulfils|fulfills)\s+(all|every)\b[^.\n]{0,20}\b(requirements?|criteri\w*|rubric)"
    r"|\b(what|as)\s+the\s+(reference|gold|expected)\s+(answer\s+)?(says|is|states)\b"
)
_MARKUP_RE = re.compile(
    r"(?im)</?\s*(tool_response|tool_result|observation|reward|score|verdict|system|judge|grade|"
    r"evaluation|feedback|untrusted|rubric|assistant|user|im_start|im_end)\b[^>]*>"
    r"|<\|[^|>\s]{1,40}\|>|<<\s*/?SYS\s*>>|\[/?(INST|ENV|SYSTEM|JUDGE|VERDICT|SCORE)\]"
    r"|\[\[\s*\d+(\.\d+)?\s*\]\]"
    r"|\b(score|rating|grade|verdict|reward|judgement|judgment|mark)\s*[:=]\s*\[?\s*-?\d"
    r"|\b(verdict|grade|judgement|judgment|evaluation|result|status|assessment)\s*[:=]\s*"
    r"(correct|pass|passed|accept|accepted|right|true|yes|a\+?)\b"
    r"|[\"'](score|rating|verdict|reward|grade|is_correct|correct|passed|pass)[\"']\s*:"
    r"|^\s*(#+\s*)?(system|judge|grader|evaluator|environment|observation|tool output|tool result|"
    r"assistant|user|human)\s*:"
)
_CODE_RE = re.compile(r"<tool_call>.*?</tool_call>|```.*?```", re.S)
_TAG_RE = re.compile(r"</?[A-Za-z_][A-Za-z0-9_]*>")
_STEP_NUM_RE = re.compile(r"(?i)\b(step|part|paso|schritt|étape|шаг)\s*\d+\b")
_WORD_RE = re.compile(r"[^\W_]+(?:['-][^\W_]+)*", re.UNICODE)
_SENTENCE_RE = re.compile(r"[.;!?\u3002\uff1b\uff01\uff1f]+(?=\s|$)|\n")
_EVIDENCE_RE = re.compile(r"[=+*/^<>\u00d7\u00f7\u221a\u2211]")
_NUMBER_RE = re.compile(r"^\d+([.,]\d+)*%?$")
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class GuardConfig:
    """Which guards run, and their thresholds.

    Attributes:
        min_content_chars: fewer letters/digits than this (markup removed) is "near-empty".
        max_chars: longer responses are "over-long".
        openers: reject reasoning-free responses (only filler words).
        markup: reject imitations of the env's, a chat template's or a verdict's markup.
        injection: reject text that addresses the grader about the score, in any of a dozen
            languages (:mod:`prm_gym.rewards.injection`).
        self_grading: reject unsupported claims of correctness and text addressing the grader.
        restatement: reject responses whose words all come from the question.
        foreign_script: reject short responses in another script than the question.
    """

    min_content_chars: int = 1
    max_chars: int = 8000
    openers: bool = True
    markup: bool = True
    injection: bool = True
    self_grading: bool = True
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
    return text.replace("\u2019", "'")


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text)


def _strip_cjk(text: str, phrases: tuple[str, ...]) -> str:
    for phrase in sorted(phrases, key=len, reverse=True):
        text = text.replace(phrase, " ")
    return text


def is_reasoning_free(text: str) -> bool:
    """True when ``text`` has words but all of them are discourse filler (no number, no content)."""
    norm = _STEP_NUM_RE.sub(" ", _normalise(text))
    if _EVIDENCE_RE.search(norm) or any(ch.isdigit() for ch in norm):
        return False
    words = _words(_strip_cjk(norm, FILLER_CJK))
    return bool(_words(_normalise(text))) and all(w in FILLER_WORDS for w in words)


def _unsupported_claim(sentence: str) -> bool:
    """A sentence made only of assessment words, filler and bare numbers (no formula, no content
    word), with at least one strong assessment word: it asserts quality without showing any."""
    if _EVIDENCE_RE.search(sentence):
        return False
    has_cjk_claim = any(p in sentence for p in ASSESSMENT_CJK)
    rest = _strip_cjk(_strip_cjk(sentence, ASSESSMENT_CJK), FILLER_CJK)
    words = [w for w in _words(rest) if not _NUMBER_RE.match(w)]
    if any(not _assesses(w) and w not in FILLER_WORDS for w in words):
        return False
    strong = [w for w in words if _assesses(w) and w not in FILLER_WORDS and w not in _WEAK]
    return has_cjk_claim or bool(strong)


def _assesses(word: str) -> bool:
    return word in ASSESSMENT_WORDS or word.startswith(ASSESSMENT_STEMS)


#: Assessment words too common in honest prose to count as a claim on their own.
_WEAK = _wordset("no nothing all can be has have been am very es est ist это is yes fine without any free")


def is_self_grading(text: str) -> bool:
    """True when ``text`` addresses the grader or has a clause that only asserts it is right.
    Clauses that show working (an ``=``) and tool calls (queries, code) are not read for
    phrases that address the grader (``45 out of 50 = 90%`` is arithmetic)."""
    norm = _normalise(text)
    clauses = [c for c in _SENTENCE_RE.split(norm) if c and c.strip()]
    prose = _normalise(_CODE_RE.sub(" ", text))
    if any(_GRADER_RE.search(c) for c in _SENTENCE_RE.split(prose) if c and "=" not in c):
        return True
    return any(_unsupported_claim(c) for c in clauses)


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
    words = _words(_normalise(answer))
    if not words or not question:
        return False
    qwords = set(_words(_normalise(question)))
    return len(words) >= 3 and all(w in qwords for w in words)


def check(text: str, question: str = "", config: GuardConfig | None = None) -> str | None:
    """The name of the first guard ``text`` trips, or None when it may be judged.

    Args:
        text: the agent's response (or answer) the judge would see.
        question: the task prompt, for the restatement and script checks.
        config: thresholds and switches; defaults to :class:`GuardConfig`.

    Returns:
        ``"over_long"``, ``"empty"``, ``"punctuation"``, ``"markup"``, ``"injection"``, ``"self_grading"``,
        ``"opener"``, ``"restatement"`` or ``"foreign_script"``; None when no guard trips.
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
    if cfg.injection and is_injection(text):
        return "injection"
    if cfg.self_grading and is_self_grading(text):
        return "self_grading"
    if cfg.openers and is_reasoning_free(text):
        return "opener"
    if cfg.restatement and _restates(text, question):
        return "restatement"
    if cfg.foreign_script and question:
        qs, ts = _script(question), _script(text)
        if qs and ts and qs != ts and len(content) < 40:
            return "foreign_script"
    return None
