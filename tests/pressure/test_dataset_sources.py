"""Each category's generator on its real offline source, and on replies shaped as the model sends them."""
from __future__ import annotations

import random

import pytest

from flawforge.pressure import sources
from flawforge.pressure.generators import (CANDIDATES_PER_TARGET, GENERATORS, CommonSense, CommonSenseReply,
                                           CreativeReply, FactReply, Facts, IdiomReply, Idioms, OODReply, Refused,
                                           Slot)
from flawforge.pressure.filters import first_failure


def test_idioms_come_from_wordnet_with_the_last_word_blanked():
    phrases = sources.wordnet_idioms()
    assert len(phrases) > 700 and "turn the tables" in phrases and "for the most part" in phrases
    candidates = Idioms().offline(phrases, 40, random.Random(1))
    assert len(candidates) == 40 and len({c.candidate_id for c in candidates}) == 40
    for c in candidates:
        assert c.source == "offline:wordnet" and c.detail["idiom"].endswith(" " + c.target_word)
        assert c.question_text.count("____") == 1 and c.target_word.isalpha()
        assert c.detail["idiom"].removesuffix(c.target_word).strip() in c.question_text
    assert {c.detail["template"] for c in candidates} == {"I1", "I2", "I3"}
    # Phrases ending in a function word ("take care of") are not idioms to complete.
    assert not Idioms.applies("take care of") and Idioms.applies("turn the tables")
    assert Idioms().offline(phrases, 40, random.Random(1)) == candidates


def test_facts_come_from_geonames_capitals_and_currencies():
    countries = sources.countries()
    france = next(c for c in countries if c.name == "France")
    assert (france.capital, france.currency, france.language) == ("Paris", "Euro", "French")
    assert Facts.facts_of(france) == [("France", "capital", "Paris"), ("France", "currency", "Euro"),
                                      ("France", "language", "French")]
    swiss = next(c for c in countries if c.name == "Switzerland")
    assert ("Switzerland", "currency", "Franc") in Facts.facts_of(swiss)
    # A capital of several words is not a one-word answer.
    assert not [f for f in Facts.facts_of(next(c for c in countries if c.name == "Andorra")) if f[1] == "capital"]
    candidates = Facts().offline(countries, 300, random.Random(2))
    assert len(candidates) == 300
    paris = [c for c in candidates if c.target_word == "Paris"]
    assert all("France" in c.question_text and c.detail["relation"] == "capital" for c in paris)
    assert {c.detail["template"] for c in candidates} == {"F1", "F2", "F3", "F4"}
    languages = [fact for fact in Facts.usable_facts(countries) if fact[1] == "language"]
    # One question a language, about the most populous country that speaks it.
    assert len(languages) == len({target for _, _, target in languages}) > 50
    assert ("Italy", "language", "Italian") in languages and ("India", "language", "English") in languages
    assert Facts().make("Italy", "language", "Italian", 0, "t").question_text == "What language do people speak in Italy?"


def test_common_sense_comes_from_wordnets_own_relations_balanced_and_the_gap_goes_to_the_model():
    relations = sources.wordnet_relations()
    # WordNet's pointers between everyday things' most common senses: hypernym, part holonym, substance meronym.
    for fact in (("beech", "IsA", "tree"), ("jeep", "IsA", "car"), ("elbow", "PartOf", "arm"),
                 ("brick", "MadeOf", "clay")):
        assert sources.Relation(*fact) in relations
    # No gloss text: "an arm is used to refer", drug names "used to treat" are not relations here.
    assert {r.relation for r in relations} == {"IsA", "PartOf", "MadeOf"}
    assert not [r for r in relations if r.subject == "arm" and r.target == "refer"]
    # One answer per question: air is made of several gases, so it has no MadeOf fact.
    assert not [r for r in relations if r.subject == "air" and r.relation == "MadeOf"]
    assert all(r.subject.isalpha() and r.subject.islower() and r.target.isalpha() and r.subject != r.target
               for r in relations)
    generator = CommonSense()
    candidates = generator.offline(relations, 40, random.Random(3))
    by_relation = {r: [c for c in candidates if c.detail["relation"] == r] for r in ("IsA", "PartOf", "MadeOf")}
    assert [len(by_relation[r]) for r in by_relation] == [10, 10, 10]
    assert all(" is a kind of ____." in c.question_text for c in by_relation["IsA"])
    assert all(" is a part of the ____." in c.question_text for c in by_relation["PartOf"])
    # A substance goes without an article.
    assert sources.Relation("tungsten", "IsA", "metal", mass=True) in relations
    assert generator.make("tungsten", "IsA", "metal", "offline:wordnet", mass=True).question_text == \
        "Fill the blank (one word): Tungsten is a kind of ____."
    # WordNet has no HasProperty relation: its quarter of the pool is asked of the model.
    slots = generator.slots(candidates, 40)
    assert [s.relation for s in slots] == ["HasProperty"] * 10
    assert [s.number for s in slots] == list(range(30, 40))


def test_creative_and_ood_targets_come_from_the_zipf_band_three_slots_each():
    band = sources.zipf_band()
    assert "lighthouse" not in band or 3.5 <= sources.zipf_of("lighthouse") <= 6.0
    assert all(3.5 <= sources.zipf_of(w) <= 6.0 for w in band[::500])
    assert "the" not in band and "house" in band
    for category in ("creative", "ood"):
        generator = GENERATORS[category]
        targets = generator.targets(band, 20, random.Random(4))
        assert len(targets) == 24 and len(set(targets)) == 24
        slots = generator.target_slots(targets)
        assert len(slots) == 24 * CANDIDATES_PER_TARGET == generator.pool_size(20)
        assert [s.target for s in slots[:3]] == [targets[0]] * 3


def test_replies_become_candidates_or_are_refused_with_a_reason():
    model = "m"
    idiom = Idioms().from_reply(Slot("idioms", 7), IdiomReply(idiom_full="Spill the beans.", target_word="beans"),
                                model)
    assert idiom.target_word == "beans" and idiom.source == "llm:m" and "spill the ____" in idiom.question_text
    with pytest.raises(Refused) as refused:
        Idioms().from_reply(Slot("idioms", 8), IdiomReply(idiom_full="spill the beans", target_word="spill"), model)
    assert refused.value.reason == "target_not_last_word"
    fact = Facts().from_reply(Slot("facts", 1), FactReply(subject="Peru", relation="capital", target_word="Lima"),
                              model)
    assert fact.question_text == "One-word answer: Peru's capital is ____."
    with pytest.raises(Refused, match="target_not_one_word"):
        Facts().from_reply(Slot("facts", 2), FactReply(subject="US", relation="capital", target_word="D.C."), model)
    with pytest.raises(Refused, match="wrong_relation"):
        CommonSense().from_reply(Slot("common_sense", 0, relation="IsA"),
                                 CommonSenseReply(subject="lemon", relation="HasProperty", target_word="sour"), model)
    sour = CommonSense().from_reply(Slot("common_sense", 0, relation="HasProperty"),
                                    CommonSenseReply(subject="Lemon", relation="HasProperty", target_word="sour"), model)
    assert sour.question_text == "Fill the blank (one word): A lemon is usually ____."
    story = GENERATORS["creative"].from_reply(
        Slot("creative", 4, target="harbor"),
        CreativeReply(microstory="The boats  slept in its arms. Where did they sleep?", target_word="Harbor"), model)
    assert story.target_word == "harbor" and story.question_text == "The boats slept in its arms. Where did they sleep?"
    with pytest.raises(Refused, match="target_changed"):
        GENERATORS["ood"].from_reply(Slot("ood", 5, target="harbor"),
                                     OODReply(context="c", style="s", text="t.", target_word="port"), model)
    assert first_failure(story, reject_sentence_counts=True) is None
