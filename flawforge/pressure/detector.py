"""Finds the forbidden word in a completion and the completion tokens that carry it.

Detection runs on the decoded text (the authoritative string): a case-insensitive match whose
neighbours on both sides are not alphanumeric by `str.isalnum()` (so "space." and "space-time"
hold "space"; "spacetime" and "space2" do not).

Token mapping: token i spans the characters [len(decode(ids[:i])), len(decode(ids[:i+1]))) of the
decoded text (prefix-incremental decoding); a match belongs to the tokens whose spans intersect
it. Where decoding is not prefix-stable (a multi-byte character split across tokens decodes as a
replacement character until it is complete), the found tokens are checked by decoding them: when
they do not hold the word the window is widened by one token each side, then every window of up
to `MAX_WINDOW` tokens is tried. No window holding the word is a `MappingError`: the study stops
rather than mis-attribute a step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from flawforge.errors import FlawforgeError

Decode = Callable[[Sequence[int]], str]
MAX_WINDOW = 8


class MappingError(FlawforgeError):
    """A word found in the decoded text could not be mapped to tokens that hold it."""


@dataclass(frozen=True)
class WordMatch:
    start: int  # character offsets in the decoded text, end exclusive
    end: int


@dataclass(frozen=True)
class Detection:
    """The word's occurrences in one completion and, per occurrence, the token indices that carry it."""

    text: str
    matches: tuple[WordMatch, ...]
    tokens: tuple[tuple[int, ...], ...]

    @property
    def found(self) -> bool:
        return bool(self.matches)

    @property
    def first_token(self) -> int | None:
        """Index of the first token of the word's first occurrence; None when the word is absent."""
        return self.tokens[0][0] if self.tokens else None


def _boundary(text: str, index: int) -> bool:
    return index < 0 or index >= len(text) or not text[index].isalnum()


def find_word(text: str, word: str) -> list[WordMatch]:
    """Whole-word, case-insensitive occurrences of `word` in `text` (non-overlapping, left to right)."""
    if not word:
        raise ValueError("the word to detect is empty")
    # Characters are compared one by one, lowered: lowering the whole text could change its length
    # (some characters lower to two), which would shift every offset after them.
    wanted = [c.lower() for c in word]
    matches, i, size = [], 0, len(word)
    while i + size <= len(text):
        if (all(text[i + k].lower() == wanted[k] for k in range(size))
                and _boundary(text, i - 1) and _boundary(text, i + size)):
            matches.append(WordMatch(i, i + size))
            i += size
        else:
            i += 1
    return matches


def token_spans(ids: Sequence[int], decode: Decode) -> list[tuple[int, int]]:
    """Character span of every token in decode(ids), by prefix-incremental decoding."""
    spans, previous = [], 0
    for i in range(len(ids)):
        current = len(decode(ids[:i + 1]))
        spans.append((previous, max(previous, current)))
        previous = max(previous, current)
    return spans


def _holds(ids: Sequence[int], decode: Decode, first: int, last: int, word: str) -> bool:
    return bool(find_word(decode(ids[first:last + 1]), word))


def map_match(ids: Sequence[int], decode: Decode, spans: list[tuple[int, int]], match: WordMatch,
              word: str) -> tuple[int, ...]:
    """Indices of the tokens carrying one match: those whose spans intersect it, verified by decoding."""
    hit = [i for i, (start, end) in enumerate(spans) if start < match.end and end > match.start]
    if hit and _holds(ids, decode, hit[0], hit[-1], word):
        return tuple(range(hit[0], hit[-1] + 1))
    if hit:
        first, last = max(0, hit[0] - 1), min(len(ids) - 1, hit[-1] + 1)
        if _holds(ids, decode, first, last, word):
            return tuple(range(first, last + 1))
    # Brute force: the shortest window, nearest the match's character position, that holds the word.
    for size in range(1, MAX_WINDOW + 1):
        starts = sorted(range(len(ids) - size + 1), key=lambda s: abs(spans[s][0] - match.start))
        for start in starts:
            if _holds(ids, decode, start, start + size - 1, word):
                return tuple(range(start, start + size))
    raise MappingError(f"{word!r} found at characters {match.start}-{match.end} of {decode(ids)!r} but no window of "
                       f"up to {MAX_WINDOW} tokens decodes to text holding it")


def detect(ids: Sequence[int], word: str, decode: Decode) -> Detection:
    """The occurrences of `word` in the completion `ids` and the tokens carrying each."""
    text = decode(ids)
    matches = find_word(text, word)
    if not matches:
        return Detection(text, (), ())
    spans = token_spans(ids, decode)
    return Detection(text, tuple(matches), tuple(map_match(ids, decode, spans, m, word) for m in matches))


def decision_step(ids: Sequence[int], word: str, decode: Decode) -> int:
    """T: the index of the word's first token in the completion, 0 when the word is absent."""
    first = detect(ids, word, decode).first_token
    return 0 if first is None else first
