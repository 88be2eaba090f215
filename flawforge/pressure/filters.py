"""Deterministic filters run before the validator (seed 001, 2.3), one small class each.

Each filter names itself, says what it refuses, and `check`s one candidate: None when it passes, else
the reason. The token filters need the studied model's tokenization of the target (S(X), which the P_sem
step returns), so they run after it and before the validator. Sentence counts of creative and OOD texts are the spec's diagnostics (the reference
implementation counts them without discarding); `reject_sentence_counts` makes them filters as the
seed first wrote them.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from functools import lru_cache
from typing import ClassVar, Sequence

from flawforge.proto.pressure_dataset import Candidate

# A sentence: text up to a run of ., ! or ? (closing quotes included) followed by a space or the end.
SENTENCE = re.compile(r"[^.!?]*[A-Za-z0-9][^.!?]*(?:[.!?]+[\"'\u201d\u2019)]*(?=\s|$)|$)")


def sentence_count(text: str) -> int:
    return sum(1 for match in SENTENCE.finditer(text.strip()) if match.group().strip())


def letters_only(text: str) -> str:
    return re.sub(r"[^A-Za-z]", "", text).lower()


class Filter(ABC):
    reason: ClassVar[str]
    explanation: ClassVar[str]

    def applies(self, candidate: Candidate) -> bool:
        return True

    @abstractmethod
    def check(self, candidate: Candidate) -> str | None:
        """None when the candidate passes; else a detail for the reject."""


class TargetAlphabetic(Filter):
    reason = "target_not_alphabetic"
    explanation = "The target is one word of letters only."

    def check(self, candidate: Candidate) -> str | None:
        target = candidate.target_word
        return None if target.isalpha() else f"{target!r} has characters other than letters"


class TargetNotInPromptAsWord(Filter):
    reason = "target_in_prompt"
    explanation = "The question does not contain the target as a whole word (any case)."

    def check(self, candidate: Candidate) -> str | None:
        target = re.escape(candidate.target_word)
        # Word boundaries by letters and digits: "Paris." and "(paris)" contain it, "Parisian" does not.
        found = re.search(rf"(?<![^\W_]){target}(?![^\W_])", candidate.question_text, re.IGNORECASE)
        return None if found is None else f"{candidate.target_word!r} at character {found.start()}"


class TargetNotInStrippedPrompt(Filter):
    reason = "target_in_stripped_prompt"
    explanation = ("The question's letters, with everything else removed, do not contain the target's "
                   "(catches 'P-a-r-i-s' and 'par is'; as in the reference, also any word that contains it).")

    def check(self, candidate: Candidate) -> str | None:
        target = letters_only(candidate.target_word)
        return None if target not in letters_only(candidate.question_text) else f"{target!r} in the letters"


# What a word may add to another's stem and still be the same word's family ("bake" -> "baker", "gold" ->
# "golden", "sun" -> "sunny"); other endings are other words ("blank" -> "blanket", "pain" -> "paint").
DERIVATIONAL_ENDINGS = frozenset({"e", "r", "er", "or", "ist", "ian", "ri", "eri", "y", "i", "en", "ic", "al", "man"})
MIN_STEM = 3
WORD = re.compile(r"[A-Za-z]+")


@lru_cache(maxsize=1)
def _stemmer():
    import snowballstemmer

    return snowballstemmer.stemmer("english")


def same_family(word: str, other: str) -> bool:
    """Whether two words share a stem: equal Snowball (Porter2) stems, or the longer stem is the shorter (3 letters
    or more) plus a derivational ending, its last consonant doubled or not ("carving"/"carve", "baker"/"bake",
    "sunny"/"sun")."""
    short, long = sorted(_stemmer().stemWords([word.lower(), other.lower()]), key=len)
    if short == long:
        return True
    if len(short) < MIN_STEM or not long.startswith(short):
        return False
    rest = long[len(short):]
    return rest in DERIVATIONAL_ENDINGS or (rest[0] == short[-1] and rest[1:] in DERIVATIONAL_ENDINGS)


class TargetStemNotInPrompt(Filter):
    reason = "near_leak"
    explanation = ("No word of the question shares the target's stem ('carving knife' for 'carve', 'baker' for "
                   "'bake'): a near leak, which the whole-word and letter filters miss.")

    def check(self, candidate: Candidate) -> str | None:
        for match in WORD.finditer(candidate.question_text):
            if same_family(match.group(), candidate.target_word):
                return f"{match.group()!r} shares a stem with {candidate.target_word!r}"
        return None


class CreativeTwoSentences(Filter):
    reason = "not_two_sentences"
    explanation = "A creative micro-story is exactly two sentences."

    def applies(self, candidate: Candidate) -> bool:
        return candidate.category == "creative"

    def check(self, candidate: Candidate) -> str | None:
        count = sentence_count(candidate.question_text)
        return None if count == 2 else f"{count} sentences"


class OODOneOrTwoSentences(Filter):
    reason = "not_one_or_two_sentences"
    explanation = "An out-of-distribution text is one or two sentences."

    def applies(self, candidate: Candidate) -> bool:
        return candidate.category == "ood"

    def check(self, candidate: Candidate) -> str | None:
        count = sentence_count(candidate.question_text)
        return None if 1 <= count <= 2 else f"{count} sentences"


class TokenFilter(ABC):
    """A filter on the studied model's tokenization of the target: S(X), its written forms' token sequences."""

    reason: ClassVar[str]
    explanation: ClassVar[str]

    @abstractmethod
    def check(self, candidate: Candidate, sequences: Sequence[Sequence[int]]) -> str | None:
        """None when the candidate passes; else a detail for the reject."""


class SingleTokenTarget(TokenFilter):
    reason = "target_multi_token"
    explanation = ("Some written form of the target (' Paris', 'paris', 'Paris.'...) is a single token of the studied "
                   "model, so the logit lens, the suppression and the taxonomy read the word itself (p_first), not "
                   "a first word-piece that other words share.")

    def check(self, candidate: Candidate, sequences: Sequence[Sequence[int]]) -> str | None:
        if not sequences:
            return f"no written form of {candidate.target_word!r} decodes back to it"
        if any(len(sequence) == 1 for sequence in sequences):
            return None
        return f"every written form of {candidate.target_word!r} takes {min(map(len, sequences))} tokens or more"


HARD_FILTERS: tuple[Filter, ...] = (TargetAlphabetic(), TargetNotInPromptAsWord(), TargetNotInStrippedPrompt(),
                                    TargetStemNotInPrompt())
TOKEN_FILTERS: tuple[TokenFilter, ...] = (SingleTokenTarget(),)
SENTENCE_FILTERS: tuple[Filter, ...] = (CreativeTwoSentences(), OODOneOrTwoSentences())


def first_failure(candidate: Candidate, reject_sentence_counts: bool) -> tuple[str, str] | None:
    """(reason, detail) of the first filter the candidate fails, in the seed's order; None if it passes."""
    filters = HARD_FILTERS + (SENTENCE_FILTERS if reject_sentence_counts else ())
    for one in filters:
        if one.applies(candidate):
            detail = one.check(candidate)
            if detail is not None:
                return one.reason, detail
    return None


def first_token_failure(candidate: Candidate, sequences: Sequence[Sequence[int]]) -> tuple[str, str] | None:
    """(reason, detail) of the first token filter the candidate fails; None if it passes."""
    for one in TOKEN_FILTERS:
        detail = one.check(candidate, sequences)
        if detail is not None:
            return one.reason, detail
    return None


def sentence_diagnostic(candidate: Candidate) -> dict:
    """The sentence count of a creative or OOD text and whether it fits its category's rule."""
    for one in SENTENCE_FILTERS:
        if one.applies(candidate):
            return {"sentence_count": sentence_count(candidate.question_text),
                    "sentence_rule_met": one.check(candidate) is None}
    return {}
