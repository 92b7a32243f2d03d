"""The words bench_envs.py puts beside its rows: each comparison's like-for-like conditions, and why
a row can still lose (what our step or reset does that the peer's does not)."""

from __future__ import annotations

#: Each (kind, form)'s fairness conditions beyond SAME.
CONDITIONS = {
    ("math", "gem"): "both answer \\boxed{N} after the same 70 characters of reasoning; GEM runs math-verify on "
    "every answer, ours decides a boxed number exactly (math-verify only gets what exact numbers and the MATH "
    "grader's normalised string cannot decide)",
    ("math", "skyrl"): "both answer the plain number after the same 70 characters of reasoning",
    ("sql", "any"): "query text fresh every pass on both sides (no text cache answers)",
    ("search", "any"): "",
    ("search_tool", "any"): "one search call with retrieval, 106k passages, top 3; the peer over HTTP to the same "
    "RetrievalServer process",
}
#: Why a row can still lose: what our step does that the peer's does not.
MISS_REASON = {
    ("skyrl", "math"): "goal (#25: at least skyrl-gym's speed) missed, ours takes {miss}x its time. skyrl's "
    "GSM8kEnv step is one regex search and a string compare of the number (no math equivalence: '42.0' scores 0 "
    "against '42'; no format or tool checks; an empty metadata dict); ours is the general step every prm/ env "
    "shares: the parse with its leniency (think blocks, markup imitation, tag balance, tool calls; one pass over "
    "the text), the pluggable judge expression with each judge's failure isolated, exact numeric comparison, and "
    "the info contract of docs/contract.md. The floor, measured in this run: parse_action alone takes {parse} us and "
    "building the contract's info dict from constants {floor} us, {both} us together against skyrl-gym's "
    "{peer} us for the whole row, before any judging; the rest is ToolEnv.step in envs/base.py (the judge "
    "loop with verdict checks, the Turn record), a fixed cost per turn that does not grow with the reasoning's length",
    ("gem", "search"): "GEM's QaEnv step is one regex and a SQuAD-normalised compare; ours also parses the "
    "whole turn and builds the info contract (reward terms, judge/parse/tool diagnostics, retrieval stats)",
    ("skyrl", "search"): "skyrl's SearchEnv answer step is a substring check, one regex and a SQuAD-normalised "
    "compare; ours also parses the whole turn and builds the info contract (reward terms, judge/parse/tool "
    "diagnostics, retrieval stats)",
    ("skyrl", "sql"): "with the default judges ours also parses the submitted query with sqlglot (once, shared by "
    "the judges) for the syntax and schema-link partial credit that skyrl-gym does not give",
}
#: Why a reset + step row can still lose: what our reset does that the peer's does not.
RESET_REASON = {
    "math": "our reset also hands out a fresh copy of the tool schemas in info['tools'] and records the "
    "episode's RNG state for replay; skyrl-gym's 'reset' (construct + init) only stores the prompt",
    "search": "our reset also hands out a fresh copy of the tool schemas in info['tools'] and records the "
    "episode's RNG state for replay",
    "sql": "our reset also opens and checks the episode's database read-only (file check, connect, PRAGMAs) "
    "and hands out the tool schemas; skyrl-gym opens its connection inside the step",
}
