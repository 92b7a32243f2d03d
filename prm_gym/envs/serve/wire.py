"""The env server's wire format: env values as JSON and back.

An env's ``info`` holds nested dicts of scalars (docs/contract.md, "Rewards and info"), which
may include NumPy scalars and non-finite floats that JSON cannot carry. :func:`to_wire` turns a
value into plain JSON data: NumPy scalars and arrays become Python numbers and lists, tuples
become lists, a non-finite float becomes ``{"$float": "nan" | "inf" | "-inf"}``, and anything
else that is not JSON (an object) becomes its ``str()``. :func:`from_wire` restores the floats;
every other value comes back as the JSON type it was sent as.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

#: The key of the tagged form of a non-finite float.
FLOAT_TAG = "$float"
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return {FLOAT_TAG: "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def to_wire(value: Any) -> Any:
    """``value`` as JSON data (see the module docstring); never raises on odd values."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return _float(float(value))
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, dict):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_wire(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_wire(value.tolist())
    return str(value)


def from_wire(value: Any) -> Any:
    """The value :func:`to_wire` encoded, with tagged non-finite floats restored."""
    if isinstance(value, dict):
        if len(value) == 1 and value.get(FLOAT_TAG) in _NON_FINITE:
            return _NON_FINITE[value[FLOAT_TAG]]
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    return value


def dumps(value: Any) -> bytes:
    """``value`` encoded for the wire: :func:`to_wire`, then ASCII JSON (lone surrogates survive)."""
    return json.dumps(to_wire(value), ensure_ascii=True, allow_nan=False).encode("ascii")
