"""A real-English-text passage corpus from the dictionaries Debian packages for dictd (issue 46).

    apt-get install dict-gcide dict-wn dict-foldoc dict-jargon dict-devil
    python benchmarks/real_text_corpus.py --out runs/dictd.jsonl
    python benchmarks/bench_bm25_scale.py --corpus runs/dictd.jsonl

No package the project may use ships real text in its wheel; Debian's dictd databases are real
English prose under free licences, installed by ``apt-get`` (nothing is fetched at run time). Read
from ``/usr/share/dictd`` (``NAME.index``: headword, base64 offset, base64 length per line;
``NAME.dict.dz``: dictzip, which gzip reads):

* ``gcide`` (dict-gcide): the Collaborative International Dictionary of English (Webster's 1913
  and WordNet 1.5 with additions), GPL-2+;
* ``wn`` (dict-wn): WordNet 3.0 glosses, the WordNet 3.0 licence (BSD-like);
* ``foldoc`` (dict-foldoc): the Free On-line Dictionary of Computing, GFDL-1.1+;
* ``jargon`` (dict-jargon): the Jargon File 4.4.7, public domain;
* ``devil`` (dict-devil): Bierce's The Devil's Dictionary, public domain;
* ``vera`` (dict-vera, GFDL-1.1+): acronym expansions of a few words each, not prose, so only
  read when named in ``--dicts``.

Each distinct entry (several headwords may point at one) is read once, in the order of its
dictionary file. Cleaning: gcide's pronunciations (``\\Ben`e*fit\\``) and source marks (``[1913
Webster]``, ``[PJC]``, ...) are dropped, syllable marks inside words joined (``Ben"e*fit`` ->
``Benefit``), dictd's cross-reference braces removed, whitespace collapsed; gcide's ASCII accent
codes (``caf['e]``) stay as they are. WordNet's dictd entries repeat a synset's gloss under every
word of the synset, so ``wn`` entries are split into senses (``headword (pos) gloss``) and a gloss
already seen is skipped (117,739 glosses remain: about one per synset); exact repeats of a cleaned
entry in any dictionary are skipped too. Passages are ``--min-words`` to ``--max-words`` words
(default 40-200, the DPR Wikipedia passages hold 100): an entry longer than the maximum is split
into near-equal chunks at word boundaries, and consecutive short entries of one dictionary (its
neighbours in the file) are joined until the minimum is reached, like a column of a printed page;
``--min-words 0`` keeps one entry a passage. Ids are ``<dict>-<number>``; no titles (each entry
starts with its headword). The output is the project's corpus jsonl (``write_corpus``: ``id``,
``title``, ``text``, ``contents``), which the Search env's ``bm25`` backend and pyserini's indexer
both read. Deterministic: the same installed packages give the same file.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import math
import re
import statistics
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prm_gym.envs.search.index import Passage, write_corpus

DICTD = Path("/usr/share/dictd")


@dataclass(frozen=True)
class Source:
    name: str
    package: str
    licence: str
    what: str


SOURCES = {
    s.name: s
    for s in (
        Source("gcide", "dict-gcide", "GPL-2+", "Collaborative International Dictionary of English"),
        Source("wn", "dict-wn", "WordNet 3.0 licence (BSD-like)", "WordNet 3.0 glosses"),
        Source("foldoc", "dict-foldoc", "GFDL-1.1+", "Free On-line Dictionary of Computing"),
        Source("jargon", "dict-jargon", "public domain", "The Jargon File 4.4.7"),
        Source("devil", "dict-devil", "public domain", "The Devil's Dictionary (Bierce)"),
        Source("vera", "dict-vera", "GFDL-1.1+", "V.E.R.A. acronyms (not prose)"),
    )
}
#: Read unless ``--dicts`` says otherwise: the prose dictionaries.
DEFAULT = ("gcide", "wn", "foldoc", "jargon", "devil")
APT = "apt-get install dict-gcide dict-wn dict-foldoc dict-jargon dict-devil"

_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_PRONUNCIATION = re.compile(r"\s*\\[^\\\n]{1,80}\\")
_SOURCE_MARK = re.compile(r"\[(?:1913 Webster|Webster 1913 Suppl\.|WordNet 1\.5|PJC)(?: ?\+ ?PJC)?\]")
_INWORD_MARK = re.compile(r"(?<=\w)[*\"`](?=\w)")
_WN_SENSE = re.compile(r"\n\s+(?:(n|v|adj|adv)\s+)?\d+:\s")


def b64_number(s: str) -> int:
    """A dictd index number (offset or length): base64 digits, most significant first."""
    n = 0
    for c in s:
        n = n * 64 + _B64[c]
    return n


def read_entries(index: Path, data: Path) -> list[str]:
    """The distinct entries of one dictd database, in the order of its data file (the
    ``00-database-*`` / ``00database*`` header entries left out)."""
    spans: set[tuple[int, int]] = set()
    with index.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3 or fields[0].startswith(("00-database", "00database")):
                continue
            spans.add((b64_number(fields[1]), b64_number(fields[2])))
    with gzip.open(data) as fh:  # dictzip is gzip with an extra header field
        raw = fh.read()
    return [raw[o : o + n].decode("utf-8", errors="replace") for o, n in sorted(spans)]


def clean(text: str) -> str:
    """An entry as plain text (see the module docstring)."""
    text = _PRONUNCIATION.sub("", text)
    text = _SOURCE_MARK.sub(" ", text)
    text = text.replace("{", "").replace("}", "")
    text = _INWORD_MARK.sub("", text)
    return " ".join(text.split())


def units(name: str, entry: str) -> list[tuple[str, str]]:
    """``(key, text)`` pieces of one entry; a key already seen in the corpus is skipped. WordNet
    entries give one piece a sense, keyed by its gloss; the others one piece, keyed by its text."""
    if name != "wn":
        text = clean(entry)
        return [(text, text)] if text else []
    head, _, body = entry.partition("\n")
    parts = _WN_SENSE.split("\n" + body)  # [before, pos, gloss, pos, gloss, ...]
    out, pos = [], ""
    for i in range(1, len(parts) - 1, 2):
        pos = parts[i] or pos
        gloss = clean(parts[i + 1])
        if gloss:
            out.append((gloss, f"{clean(head)} ({pos}) {gloss}"))
    return out


def chunks(words: Sequence[str], max_words: int) -> list[list[str]]:
    """``words`` in ``ceil(len / max_words)`` near-equal runs."""
    parts = max(1, math.ceil(len(words) / max_words))
    cuts = [round(i * len(words) / parts) for i in range(parts + 1)]
    return [list(words[a:b]) for a, b in itertools.pairwise(cuts)]


def pack(texts: Iterable[str], min_words: int, max_words: int) -> Iterator[str]:
    """Passages of ``min_words``-``max_words`` words from consecutive texts: a long text is split
    by :func:`chunks`, short neighbours are joined (a passage falls short of ``min_words`` only
    where the next text would overflow ``max_words``, and at the end)."""
    buf: list[str] = []
    for text in texts:
        for piece in chunks(text.split(), max_words):
            if buf and len(buf) + len(piece) > max_words:
                yield " ".join(buf)
                buf = []
            buf.extend(piece)
            if len(buf) >= min_words:
                yield " ".join(buf)
                buf = []
    if buf:
        yield " ".join(buf)


@dataclass
class Stats:
    name: str
    entries: int = 0
    units: int = 0
    passages: int = 0
    words: int = 0


def build(
    dictd: Path = DICTD, names: Sequence[str] = DEFAULT, min_words: int = 40, max_words: int = 200
) -> tuple[list[Passage], list[Stats]]:
    """The passages of the installed dictionaries among ``names`` and per-dictionary counts
    (dictionaries not installed are left out of both)."""
    passages: list[Passage] = []
    stats: list[Stats] = []
    seen: set[str] = set()
    for name in names:
        index, data = dictd / f"{name}.index", dictd / f"{name}.dict.dz"
        if not (index.is_file() and data.is_file()):
            continue
        st = Stats(name)
        entries = read_entries(index, data)
        st.entries = len(entries)
        texts = []
        for entry in entries:
            for key, text in units(name, entry):
                if key not in seen:
                    seen.add(key)
                    texts.append(text)
        st.units = len(texts)
        for text in pack(texts, min_words, max_words):
            passages.append(Passage(f"{name}-{st.passages:06d}", "", text))
            st.passages += 1
            st.words += len(text.split())
        stats.append(st)
    return passages, stats


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the jsonl corpus to write")
    ap.add_argument("--dictd", default=str(DICTD), help="folder of the dictd databases")
    ap.add_argument("--dicts", default=",".join(DEFAULT), help=f"comma-separated, of {', '.join(SOURCES)}")
    ap.add_argument("--min-words", type=int, default=40, help="join consecutive short entries up to this")
    ap.add_argument("--max-words", type=int, default=200, help="split longer entries into chunks")
    args = ap.parse_args(argv)
    names = [n for n in args.dicts.split(",") if n]
    unknown = [n for n in names if n not in SOURCES]
    if unknown or args.max_words < 1 or args.min_words > args.max_words:
        ap.error(f"unknown dictionaries {unknown} (known: {', '.join(SOURCES)})" if unknown else "bad word limits")
    passages, stats = build(Path(args.dictd), names, args.min_words, args.max_words)
    if not passages:
        print(f"no dictd database of {', '.join(names)} is installed in {args.dictd}; install them with\n"
              f"    {APT}\n(as root; Debian/Ubuntu) and run again.", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    write_corpus(passages, args.out)
    for st in stats:
        src = SOURCES[st.name]
        print(f"{src.package:<12} {src.what} ({src.licence}): {st.entries:,} entries, {st.units:,} kept after "
              f"removing repeats, {st.passages:,} passages, {st.words:,} words")  # fmt: skip
    missing = [SOURCES[n].package for n in names if n not in {st.name for st in stats}]
    if missing:
        print(f"not installed (skipped): {', '.join(missing)}")
    lengths = [len(p.text.split()) for p in passages]
    q = statistics.quantiles(lengths, n=10) if len(lengths) > 1 else [float(lengths[0])] * 9
    print(f"{len(passages):,} passages, {sum(lengths):,} words (median {statistics.median(lengths):.0f} a passage, "
          f"10-90% {q[0]:.0f}-{q[-1]:.0f}; limits {args.min_words}-{args.max_words}) -> {args.out}")  # fmt: skip


if __name__ == "__main__":
    main()
