"""The unit words a math answer may carry after its number (``18 dollars``, ``3.5 square feet``).

Against a gold answer that is a number, ``<number> <unit words>`` counts as the number only when
every word is a unit of measure or of currency from :data:`UNIT_WORDS` (plurals included) and the
last one is a unit, not a qualifier such as ``square``. Anything else after a number may change
its value or deny it (``15/7 squared``, ``18 halves``, ``15/7 dozen``, ``15/7 is not correct``),
so it does not count; nor do counted nouns (``18 apples``), as in PRM800K's grader, which strips
only a fixed list of units.
"""

from __future__ import annotations


def _with_plurals(words: str) -> frozenset[str]:
    out: set[str] = set()
    for w in words.split():
        out |= {w, w + "s", w + "es"}
    return frozenset(out)


#: Units of measure and of currency, lower case, singular (plurals added with -s/-es).
UNITS: frozenset[str] = _with_plurals(
    """mm millimeter millimetre cm centimeter centimetre meter metre km kilometer kilometre
    inch ft foot feet yd yard mile mi
    acre hectare
    ml milliliter millilitre liter litre gallon gal quart qt pint cup cc teaspoon tablespoon tsp
    tbsp oz ounce
    mg milligram gram kg kilogram lb pound ton tonne
    ms millisecond sec second min minute hr hour day week month year yr decade century centuries
    mph kph kmh kmph knot
    degree radian celsius fahrenheit kelvin
    dollar cent euro yen yuan rupee peso franc usd eur gbp
    byte kb mb gb tb bit
    percent calorie kcal watt kw volt amp ampere joule newton pascal hertz hz
    unit"""
)
#: Units written as one letter, accepted only in a slashed compound (``km/h``, ``m/s``): alone they are variables.
IN_COMPOUND: frozenset[str] = frozenset({"h", "s", "m", "g", "l"})
#: Words that qualify the unit after them and never end the phrase (``square feet``, ``km per hour``).
QUALIFIERS: frozenset[str] = frozenset({"square", "sq", "cubic", "cu", "fl", "fluid", "per"})


def is_unit_phrase(words: str) -> bool:
    """True when ``words`` (what follows the number) is a unit phrase: units and qualifiers only,
    ending on a unit, single letters only in a slashed compound (``km/h``)."""
    tokens: list[tuple[str, bool]] = []  # (word, part of a slashed compound such as km/h)
    for word in words.lower().split():
        parts = word.rstrip(".").split("/")
        tokens += [(p.rstrip("."), len(parts) > 1) for p in parts]
    if not tokens:
        return False
    for token, compound in tokens:
        if token in UNITS or token in QUALIFIERS:
            continue
        if not (compound and token in IN_COMPOUND):
            return False
    return tokens[-1][0] not in QUALIFIERS
