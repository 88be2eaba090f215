"""The ways a word X can be written and tokenized (the set S(X)) and the probability summed over them,
P_sem (seed 001's semantic pressure). Pure: the caller gives the tokenizer's encode and decode.

Variants: X, lower, title and upper case, each as v, " v", "v ", " v ", each followed by "", "." or ". "
(36 combinations; the period goes after the form with its trailing space removed, as in the
reference, which leaves 24 distinct strings for "Paris"). A variant's token ids are kept when their
decoded text normalizes to X; ids seen before are dropped. P = min(1, sum over S(X) of the product of
the tokens' conditional probabilities): S(X) nests prefixes ("Paris" and "Paris."), so the sum can
count a path twice and is clamped. p_first, the mass on the single-token sequences, is reported
beside it; a word with no single-token form has none (no first word-piece stands in for the word).
"""
from __future__ import annotations

import math
import unicodedata
from typing import Callable, Sequence

Encode = Callable[[str], list[int]]
Decode = Callable[[Sequence[int]], str]

# Replaced by spaces before comparing (the reference's set, not string.punctuation).
NORM_PUNCTUATION = ".,!?;:\"'()[]{}<>/\\|-\u2013\u2014_`"
_NORM_TABLE = str.maketrans({c: " " for c in NORM_PUNCTUATION})


def norm(text: str) -> str:
    """NFKC, lower case, the punctuation set replaced by spaces, runs of spaces collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().translate(_NORM_TABLE).split())


def variants(word: str) -> list[str]:
    """The distinct written forms of `word` whose tokenizations make up S(X), in a fixed order.

    As the reference builds them, a period goes after the spaced form with its trailing space removed
    ("Paris " + "." is "Paris."), so each case form gives 8 distinct strings of its 12 and "Paris" 24
    (the spec's count for SmolLM2: 24 sequences)."""
    forms = dict.fromkeys([word, word.lower(), word.title(), word.upper()])
    spaced = [f"{lead}{form}{trail}" for form in forms for lead, trail in (("", ""), (" ", ""), ("", " "), (" ", " "))]
    return list(dict.fromkeys(s if not end else s.rstrip() + end for s in spaced for end in ("", ".", ". ")))


def sequences(word: str, encode: Encode, decode: Decode) -> list[tuple[int, ...]]:
    """S(X): the distinct token sequences of the variants whose decoded text normalizes to X."""
    wanted, found = norm(word), {}
    for variant in variants(word):
        ids = tuple(encode(variant))
        if ids and norm(decode(ids)) == wanted:
            found.setdefault(ids, None)
    return list(found)


def single_token_ids(seqs: Sequence[tuple[int, ...]]) -> list[int]:
    """The token ids whose probability is p_first: those of the single-token sequences of S(X). Empty for
    a word every form of which takes several tokens: its p_first is not defined."""
    return sorted({s[0] for s in seqs if len(s) == 1})


def p_sem(seq_logprobs: Sequence[Sequence[float]]) -> float:
    """P = min(1, sum over sequences of the product of token probabilities), from per-token log-probabilities."""
    return min(1.0, sum(math.exp(sum(lps)) for lps in seq_logprobs))
