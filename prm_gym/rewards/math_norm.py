"""Math answers cleaned the way a MATH grader reads them, and plain numbers read exactly.

:func:`clean` turns a submitted or gold answer into the LaTeX a grader compares: the last
``\\boxed{}`` taken out, math delimiters, bold markers, ``\\text{}``, ``\\$``, degree and percent
signs, a trailing ``\\text{ unit}`` and a trailing period dropped, ``\\dfrac``/``\\tfrac`` read as
``\\frac``, and thousands separators (``10,\\!080``, ``11,\\! 111,\\! 100``, a thin or
non-breaking space) joined. An ASCII space between two digits is kept: ``1 8`` is two numbers,
never 18. A submitted answer's ``\\text{...}`` after the number is dropped only when it is a unit
(:mod:`prm_gym.rewards.math_units`); a gold answer's always is.

:func:`number` reads a cleaned answer as an exact :class:`~fractions.Fraction` when it is one
number (an integer, decimal, ``a/b``, ``\\frac{a}{b}``, a mixed number ``137 \\frac{1}{2}``,
scientific notation ``1.8e1`` or ``1.8 \\times 10^{1}``), else None. :func:`grader_key` is the
string a MATH grader compares (the normalisation of Hendrycks et al.'s ``is_equiv``, written from
its published definition), except that spaces between digits are kept.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

from prm_gym.rewards.math_units import is_unit_phrase

_SPACE_MACROS = r"\\,|\\;|\\:|\\ |~|\\quad|\\qquad|\\enspace|\\thinspace"
_SOFT_SPACES = "\u2009\u202f\u00a0\u2007\u2008\u200a"
_THOUSANDS_GAP = re.compile(rf"(?<=\d)(?:{_SPACE_MACROS}|[{_SOFT_SPACES}]|\{{,\}})(?=\d{{3}}(?!\d))")
_COMMA_NUMBER = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DECIMAL = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d{1,3})?")  # exponent: 3 digits at most
_SLASH = re.compile(r"([-+]?\d+)/(\d+)")
_FRAC = re.compile(r"([-+]?)\\frac(?:\{\s*([-+]?\d+)\s*\}|(\d))(?:\{\s*(\d+)\s*\}|(\d))")
_MIXED = re.compile(r"([-+]?\d+)\s*\\frac\{(\d+)\}\{(\d+)\}")
_TIMES_TEN = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?")
_WRAPPERS = ("text", "textbf", "textit", "textrm", "mathrm", "mathbf", "mbox", "emph", "textnormal")
_WRAPPED = re.compile(rf"\\(?:{'|'.join(_WRAPPERS)})\s*\{{([^{{}}]*)\}}")
_UNIT_TEXT = r"\{\s*[A-Za-z][A-Za-z .^\d/]*\}(?:\s*\^\s*\{?\d+\}?)?"  # {cm}, { square feet}, {cm}^2
_TRAILING_UNIT = re.compile(rf"\s*\\(?:{'|'.join(_WRAPPERS)})\s*{_UNIT_TEXT}\s*$")
_UNIT_WORDS = re.compile(r"(.*?\d\}?)\s+([A-Za-z][A-Za-z./]+(?:\s+[A-Za-z][A-Za-z./]*){0,3})")
_INNER_DOLLAR = re.compile(r"(?<!\\)\$")
#: MATH's thousands separator with a space after it (``11,\! 111``): the space goes too.
_COMMA_BANG_GAP = re.compile(r"(?<=\d),\\!\s+(?=\d{3}(?!\d))")
_LOOSE_DIGITS = re.compile(r"\d\s+\.?\d")
_DROP = ("\\left", "\\right", "\\displaystyle", "\\!", "^{\\circ}", "^\\circ", "\\circ", "°", "\\%", "%", "\\$")


#: Longest answer :func:`clean` rewrites (its patterns stay linear-time well past this).
MAX_CLEAN_CHARS = 2000


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """The content of the ``{...}`` group opening at ``text[start]`` and the index past it."""
    if start >= len(text) or text[start] != "{":
        return None
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i], i + 1
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` or ``\\fbox{...}`` in ``text``, or None."""
    at = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if at < 0:
        return None
    rest = text[at:].removeprefix("\\boxed").removeprefix("\\fbox")
    if rest.startswith(" ") and rest.strip():  # \boxed 5
        return rest.split()[0]
    group = _braced(rest, 0)
    return group[0] if group else None


def _strip_markup(text: str) -> str:
    """Delimiters, bold markers, a whole-answer ``\\text{}``, a trailing period."""
    text = text.strip()
    for _ in range(3):
        before = text
        for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**"), ("__", "__")):
            if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
                text = text[len(left) : -len(right)].strip()
        text = text.rstrip().removesuffix(".").rstrip()
        if text.startswith("\\boxed") or text.startswith("\\fbox"):
            text = (last_boxed(text) or text).strip()
        whole = _WRAPPED.fullmatch(text)
        if whole:
            text = whole.group(1).strip()
        if text == before:
            break
    return text


def _drop_trailing_unit(text: str, any_words: bool) -> str:
    """``text`` without its trailing ``\\text{ unit}`` (any words when ``any_words``, else units only)."""
    m = _TRAILING_UNIT.search(text)
    if m is None or m.start() == 0:  # no unit, or nothing but the \text{} itself
        return text
    inner = _WRAPPED.search(m.group(0))
    if not any_words and not (inner and is_unit_phrase(inner.group(1))):
        return text
    return text[: m.start()]


def clean(text: str, any_unit: bool = False) -> str:
    """``text`` as the LaTeX a MATH grader compares (see the module docstring). ``any_unit``: drop
    any trailing ``\\text{words}`` (for gold answers), not only a unit."""
    if not text.isascii():  # thousands gaps before NFKC, which turns a thin space into a plain one
        text = unicodedata.normalize("NFKC", _THOUSANDS_GAP.sub("", text).replace("\u2212", "-"))
    boxed = last_boxed(text)
    text = boxed if boxed is not None else text
    if len(text) > MAX_CLEAN_CHARS:  # no answer is this long: left as it is (and too long for sympy)
        return text.strip()
    text = _strip_markup(text)
    text = _COMMA_BANG_GAP.sub(",\\!", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\n", " ")
    for token in _DROP:
        text = text.replace(token, "")
    text = _THOUSANDS_GAP.sub("", text)
    if (text.startswith("$") and text[1:2].isdigit()) or text.startswith("-$"):
        text = text.replace("$", "", 1)
    text = _drop_trailing_unit(text, any_unit)
    text = _WRAPPED.sub(lambda m: m.group(1), text)
    text = re.sub(rf"(?:{_SPACE_MACROS})", " ", text)
    return " ".join(text.split())


def number(text: str) -> Fraction | None:
    """``text`` (already cleaned) as an exact number when it is one number, else None."""
    s = text.strip()
    if _COMMA_NUMBER.fullmatch(s):
        s = s.replace(",", "")
    try:
        if _DECIMAL.fullmatch(s):
            return Fraction(s)
        m = _SLASH.fullmatch(s)
        if m:
            return Fraction(int(m.group(1)), int(m.group(2)))
        m = _FRAC.fullmatch(s)
        if m:
            sign = -1 if m.group(1) == "-" else 1
            return sign * Fraction(int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5)))
        m = _MIXED.fullmatch(s)
        if m and int(m.group(2)) < int(m.group(3)):  # 137 \frac{1}{2}: a proper fraction after a whole number
            whole, part = int(m.group(1)), Fraction(int(m.group(2)), int(m.group(3)))
            return whole - part if m.group(1).startswith("-") else whole + part
        m = _TIMES_TEN.fullmatch(s)
        if m and abs(int(m.group(2))) <= 400:
            return Fraction(m.group(1)) * Fraction(10) ** int(m.group(2))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def trailing_words(text: str) -> tuple[str, str] | None:
    """``(number, words)`` when ``text`` (cleaned; inner ``$`` delimiters ignored) ends in words
    after something ending in a digit (``18 dollars``, ``$\\frac{15}{7}$ squared``), else None."""
    m = _UNIT_WORDS.fullmatch(_INNER_DOLLAR.sub("", text).strip())
    return (m.group(1), m.group(2)) if m else None


def unit_number(text: str) -> Fraction | None:
    """The number in ``text`` (cleaned) when it is one number followed by a unit phrase
    (``18 dollars``, ``3.5 square feet``, ``40 km/h``; :func:`~prm_gym.rewards.math_units.is_unit_phrase`):
    never a word that changes or denies the value (``15/7 squared``, ``18 halves``,
    ``15/7 is not correct``). Used only against a gold answer that is a number."""
    split = trailing_words(text)
    if split is None or not is_unit_phrase(split[1]):
        return None
    return number(split[0].strip())


def loose_digits(text: str) -> bool:
    """True when two digits are separated only by spaces (``1 8``, ``18 20``): two numbers."""
    return bool(_LOOSE_DIGITS.search(text))


def _fix_fracs(s: str) -> str:
    """``\\frac12`` and ``\\frac1{2}`` as ``\\frac{1}{2}`` (one-character arguments braced)."""
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part.startswith("{") or len(part) < 2:
            out += part
            continue
        a, rest = part[0], part[1:]
        if rest.startswith("{"):
            out += "{" + a + "}" + rest
        else:
            out += "{" + a + "}{" + rest[0] + "}" + rest[1:]
    return out


def grader_key(text: str) -> str:
    """The string a MATH grader compares for ``text`` (already cleaned).

    The steps of the MATH ``is_equiv`` normalisation: ``\\sqrt3`` braced, one-character
    ``\\frac`` arguments braced, ``0.5`` read as ``\\frac{1}{2}``, ``a/b`` of integers as
    ``\\frac{a}{b}``, a short ``x =`` prefix dropped, a leading ``.`` given its ``0``, spaces
    removed; spaces between two digits are kept (two numbers stay two numbers).
    """
    s = text.replace("\\\\", "\\")
    if len(s.split("=")) == 2 and len(s.split("=")[0].strip()) <= 2:
        s = s.split("=")[1].strip()
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    s = re.sub(r"(\d)\s+(?=\.?\d)", "\\1\x00", s)  # digits apart stay apart
    s = s.replace(" ", "").replace("\x00", " ")
    s = s.replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    m = re.fullmatch(r"(\d+)/(\d+)", s)
    if m:
        s = f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
    return s
