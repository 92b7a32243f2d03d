"""The plain-value codec of the unit-test judge: exact round trips, strict decoding."""

from __future__ import annotations

import json
import math

import pytest

from prm_gym.rewards._codec import MAX_DEPTH, decode, encode

VALUES = [
    None,
    True,
    0,
    -(10**5000),
    1.5,
    -0.0,
    math.inf,
    complex(1, -2),
    "héllo\n",
    b"\x00\xff",
    bytearray(b"ab"),
    [1, [2, (3, 4)]],
    (0, 1),
    {1, 2},
    frozenset({"a"}),
    {"k": [1, 2], (1, 2): None},
]


@pytest.mark.parametrize("value", VALUES, ids=[type(v).__name__ for v in VALUES])
def test_round_trip_keeps_value_and_type(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is type(value)


def test_nan_survives_and_tuples_stay_tuples():
    assert math.isnan(decode(encode(math.nan)))
    assert decode(encode([(0, 1)])) == [(0, 1)] and decode(encode((0, 1))) != [0, 1]


def test_objects_with_their_own_equality_do_not_cross():
    class Anything:
        def __eq__(self, other):
            return True

    with pytest.raises(TypeError):
        encode(Anything())

    class Sly(float):
        def __eq__(self, other):
            return True

        __hash__ = float.__hash__

    back = decode(encode(Sly(0.25)))
    assert type(back) is float and back != 0.5


@pytest.mark.parametrize(
    "bad",
    [
        [],
        ["X"],
        ["I", 5],
        ["B", 1],
        ["S", None],
        ["L", [["N"], "oops"]],
        ["E", [["L", []]]],  # an unhashable set item
        ["D", [[["L", []], ["N"]]]],
        ["D", [["N"]]],
        {"tag": "N"},
        "N",
    ],
)
def test_malformed_forms_are_refused(bad):
    with pytest.raises(ValueError):
        decode(bad)


def test_depth_is_bounded_both_ways():
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ValueError):
        encode(deep)
    form: list = ["N"]
    for _ in range(MAX_DEPTH + 5):
        form = ["L", [form]]
    with pytest.raises(ValueError):
        decode(form)
