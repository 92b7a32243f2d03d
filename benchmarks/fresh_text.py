"""Fresh query text for every timed call, so no cache keyed by the text answers a benchmark.

Stdlib only: ``peer_worker.py`` imports it from the peers' own Pythons too.
"""

from __future__ import annotations

import re


def fresh_sql(sql: str, tag: str) -> str:
    """``sql`` behind an unused CTE named after ``tag``: the same rows, a text no cache has seen.

    A broken query stays broken; a query that opens with its own ``WITH`` gets one more CTE.
    """
    name = "fresh_" + re.sub(r"\W", "_", tag)
    body = sql.lstrip()
    if body[:5].upper() == "WITH " and not body[5:].lstrip().upper().startswith("RECURSIVE"):
        return f"WITH {name} AS (SELECT 1), {body[5:]}"
    return f"WITH {name} AS (SELECT 1) {body}"
