"""Plain values across the sandbox wall: a tagged JSON form of Python's builtin values.

Shipped as a file into both sandboxes of the unit-test judge (stdlib only, no prm_gym import).
:func:`encode` turns a value made of ``None``, bools, numbers, strings, bytes, lists, tuples,
sets, frozensets and dicts into JSON-ready lists; :func:`decode` turns such lists back into
values of exactly the builtin types, whatever text it is given, so a decoded value can never
run code when it is compared (no ``__eq__`` of the program's own making survives the trip).
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable
from typing import Any

#: Deepest nesting accepted either way.
MAX_DEPTH = 64

_SEQ = {"L": list, "T": tuple, "E": set, "Z": frozenset}
_SCALAR: dict[str, Callable[[str], Any]] = {
    "S": str,
    "I": lambda s: int(s, 16),
    "F": float.fromhex,
    "Y": bytes.fromhex,
    "A": bytearray.fromhex,
}


def encode(value: Any, depth: int = 0) -> list[Any]:
    """The tagged form of ``value``.

    Raises:
        TypeError: ``value`` holds something other than builtin data.
        ValueError: it is nested deeper than :data:`MAX_DEPTH`.
    """
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested deeper than {MAX_DEPTH}")
    if value is None:
        return ["N"]
    if isinstance(value, bool):
        return ["B", value is True]
    if isinstance(value, str):
        return ["S", str.__str__(value)]
    if isinstance(value, bytes | bytearray):
        return ["A" if isinstance(value, bytearray) else "Y", bytes(value).hex()]
    if isinstance(value, numbers.Integral):
        return ["I", hex(operator.index(value))]
    if isinstance(value, numbers.Real):
        return ["F", float.hex(float(value))]
    if isinstance(value, numbers.Complex):
        z = complex(value)
        return ["C", float.hex(z.real), float.hex(z.imag)]
    if isinstance(value, dict):
        return ["D", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    for tag, kind in _SEQ.items():
        if isinstance(value, kind):
            return [tag, [encode(v, depth + 1) for v in value]]
    raise TypeError(f"a {type(value).__name__} is not a plain value (None, bool, number, str, bytes or a container)")


def decode(obj: Any, depth: int = 0) -> Any:
    """The value of a tagged form (builtin types only).

    Raises:
        ValueError: ``obj`` is not a well-formed tagged value.
    """
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested deeper than {MAX_DEPTH}")
    if type(obj) is not list or not obj or type(obj[0]) is not str:
        raise ValueError("malformed value")
    tag, args = obj[0], obj[1:]
    try:
        if tag == "N" and not args:
            return None
        if tag == "B" and len(args) == 1 and type(args[0]) is bool:
            return args[0]
        if tag in _SCALAR and len(args) == 1 and type(args[0]) is str:
            return _SCALAR[tag](args[0])
        if tag == "C" and len(args) == 2 and all(type(a) is str for a in args):
            return complex(float.fromhex(args[0]), float.fromhex(args[1]))
        if tag in _SEQ and len(args) == 1 and type(args[0]) is list:
            return _SEQ[tag](decode(v, depth + 1) for v in args[0])
        if tag == "D" and len(args) == 1 and type(args[0]) is list:
            pairs = args[0]
            if not all(type(p) is list and len(p) == 2 for p in pairs):
                raise ValueError("malformed dict")
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in pairs}
    except (TypeError, OverflowError, RecursionError) as exc:  # unhashable keys, bad numbers
        raise ValueError(f"malformed value: {exc}") from None
    raise ValueError(f"malformed value (tag {tag!r})")
