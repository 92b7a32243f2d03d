"""TurnEnds: each row cut at the first id that ends its turn, however many steps are handed over at once."""

from __future__ import annotations

from typing import Any

from prm_gym.agents.turn_ends import TurnEnds


def test_rows_are_cut_at_their_first_end_of_turn_whatever_the_hand_over(tiny_tokenizer: Any) -> None:
    enc = tiny_tokenizer.encode
    eos = tiny_tokenizer.eos_token_id
    rows = [enc("ab</t>cd"), [*enc("xy"), eos, *enc("zz")], enc("qqqq"), [*enc("</t"), eos, *enc(">")]]
    width = max(len(r) for r in rows)
    padded = [r + enc("w") * (width - len(r)) for r in rows]
    ends = {}
    for chunk in (1, 3, width):  # every step, every 3 steps, all at once
        turn = TurnEnds(len(rows), tiny_tokenizer, ("</t>",))
        for start in range(0, width, chunk):
            turn.extend([r[start : start + chunk] for r in padded], eos)
        ends[chunk] = (turn.ids, turn.finish, turn.live, turn.seen)
    assert ends[1] == ends[3] == ends[width]
    ids, finish, live, seen = ends[1]
    assert tiny_tokenizer.decode(ids[0]) == "ab</t>" and finish[0] == "stop"  # the stop string kept, the rest dropped
    assert ids[1] == [*enc("xy"), eos] and finish[1] == "stop"
    assert finish[2] == "length" and live == 1 and seen == width
    assert ids[3] == [*enc("</t"), eos]  # the end-of-turn token comes first
