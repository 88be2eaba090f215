"""Deterministic filters run before the validator (seed 001, 2.3), one small class each.

Each filter names itself, says what it refuses, and `check`s one candidate: None when it passes, else
the reason. Sentence counts of creative and OOD texts are the spec's diagnostics (the reference
implementation counts them without discarding); `reject_sentence_counts` makes them filters as the
seed first wrote them.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import ClassVar

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


HARD_FILTERS: tuple[Filter, ...] = (TargetAlphabetic(), TargetNotInPromptAsWord(), TargetNotInStrippedPrompt())
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


def sentence_diagnostic(candidate: Candidate) -> dict:
    """The sentence count of a creative or OOD text and whether it fits its category's rule."""
    for one in SENTENCE_FILTERS:
        if one.applies(candidate):
            return {"sentence_count": sentence_count(candidate.question_text),
                    "sentence_rule_met": one.check(candidate) is None}
    return {}
