"""Seeded choice among phrasings, and how varied a set of texts is.

A writer that always says the same thing in the same words teaches a model one sentence; one that
draws from several phrasings, chosen by a hash of the instance and the slot, varies from instance
to instance and still writes the same text for the same instance in every run.
"""
from __future__ import annotations

import hashlib
import re
from typing import Iterable, Sequence, TypeVar

T = TypeVar("T")
WORD = re.compile(r"[A-Za-z_][\w']*|\d+|[^\sA-Za-z_\d]")


def pick(key: str, slot: str, options: Sequence[T]) -> T:
    """One of `options`, the same for the same key and slot in every run."""
    digest = hashlib.sha256(f"{key}\x00{slot}".encode("utf-8")).digest()
    return options[int.from_bytes(digest[:8], "big") % len(options)]


def counted(count: int, noun: str, verb: str | None = None) -> str:
    """'1 test', '3 tests'; with `verb` (its plural form), agreeing: '1 test fails', '3 tests fail'."""
    text = f"{count} {noun if count == 1 else noun + 's'}"
    if verb is None:
        return text
    return f"{text} {verb + ('es' if verb.endswith('ss') else 's') if count == 1 else verb}"


def order(key: str, slot: str, items: Sequence[T]) -> list[T]:
    """`items` in an order seeded by the key and slot."""
    return sorted(items, key=lambda item: hashlib.sha256(f"{key}\x00{slot}\x00{items.index(item)}".encode()).digest())


def distinct_bigram_ratio(texts: Iterable[str]) -> float | None:
    """Distinct word bigrams over all bigrams of the texts (each text's words on their own), None for no bigram."""
    seen: set[tuple[str, str]] = set()
    total = 0
    for text in texts:
        words = WORD.findall(text.lower())
        pairs = list(zip(words, words[1:]))
        total += len(pairs)
        seen.update(pairs)
    return round(len(seen) / total, 4) if total else None
