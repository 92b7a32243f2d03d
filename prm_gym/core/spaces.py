"""A text space that accepts what LLMs really produce.

Gymnasium's :class:`gymnasium.spaces.Text` only admits a fixed character set, so real model
output (unicode, newlines, emoji, markup) is "outside the space". :class:`UnicodeText` admits
any Python ``str`` up to ``max_length`` characters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

# Printable ASCII plus a spread of non-ASCII code points (Latin-1, Greek, CJK, emoji) and the
# whitespace an LLM emits; enough for `sample()` to exercise parsers on realistic junk.
_SAMPLE_ALPHABET = (
    "".join(chr(c) for c in range(32, 127)) + "\n\t" + "éüßñçøΩπλΣ中文字日本語한국어🙂🚀∑∫≤≥→" + "<>{}[]\"'/\\"
)


class UnicodeText(spaces.Space[str]):
    """Any unicode string of at most ``max_length`` characters.

    Args:
        max_length: the longest admitted string, in characters.
        seed: seed of the space's own RNG, used by :meth:`sample`.
    """

    def __init__(self, max_length: int = 1 << 20, seed: int | np.random.Generator | None = None):
        if max_length <= 0:
            raise ValueError(f"UnicodeText max_length must be positive, got {max_length}")
        self.max_length = int(max_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string of printable and non-ASCII characters (at most 256 long)."""
        length = int(self.np_random.integers(0, min(self.max_length, 256) + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in idx)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("UnicodeText", self.max_length))

    def to_jsonable(self, sample_n: Any) -> list[Any]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[Any]) -> list[str]:
        return [str(s) for s in sample_n]


def _register_vector_support() -> None:
    """Let Gymnasium's vector envs batch UnicodeText observations (as tuples of str)."""
    from collections.abc import Callable

    from gymnasium.vector.utils import create_empty_array

    @create_empty_array.register(UnicodeText)
    def _empty(space: UnicodeText, n: int = 1, fn: Callable[..., Any] = np.zeros) -> tuple[str, ...]:
        return tuple("" for _ in range(n))


_register_vector_support()
