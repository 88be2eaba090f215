"""The deterministic filters on hand-made edge cases; the validator's rubric; bins, gating, balancing, the
repetition cap and the fill by S on synthetic scores with known answers."""
from __future__ import annotations

import pytest

from flawforge.pressure import bins, validation
from pydantic import ValidationError

from flawforge.pressure.filters import first_failure, first_token_failure, sentence_count, sentence_diagnostic
from flawforge.pressure.generators import GENERATORS, make_candidate
from flawforge.proto.pressure_dataset import ValidatorReply


def cand(question: str, target: str, category: str = "facts"):
    return make_candidate(category, question, target, "test")


@pytest.mark.parametrize("question,target,reason", [
    ("The capital of France is ____.", "Paris", None),
    ("Paris is the capital of ____.", "Paris", "target_in_prompt"),
    ("Is it PARIS?", "paris", "target_in_prompt"),
    ("Answer: (paris).", "Paris", "target_in_prompt"),
    ("Spell it: P-a-r-i-s.", "Paris", "target_in_stripped_prompt"),
    ("A city: par is.", "Paris", "target_in_stripped_prompt"),
    ("The Parisian streets.", "Paris", "target_in_stripped_prompt"),  # no whole word, but its letters
    ("What is two plus two?", "4", "target_not_alphabetic"),
    ("Name the city.", "New York", "target_not_alphabetic"),
    ("Name the city.", "Saint-Denis", "target_not_alphabetic"),
    ("Name the river.", "Seine", None),
    # Near leaks: a question word of the target's family.
    ("Fill the blank (one word): A carving knife is used to ____.", "carve", "near_leak"),
    ("Someone who bakes bread is a ____.", "baker", "near_leak"),
    ("The bright day was very ____.", "sunny", None),
    ("The sun shone all day: the weather was ____.", "sunny", "near_leak"),
    ("A ring made of gold is a ____ ring.", "golden", "near_leak"),
    # Another word that begins the same is not of the family: "Fill the blank" does not leak "blanket".
    ("Fill the blank (one word): A quilt is a kind of ____.", "blanket", None),
])
def test_filters(question, target, reason):
    failed = first_failure(cand(question, target), reject_sentence_counts=False)
    assert (failed[0] if failed else None) == reason


def test_sentence_counts_are_counted_and_only_filter_when_asked():
    assert [sentence_count(t) for t in ("One. Two?", "No end at all", "He said \"hi.\" Then he left!",
                                        "Wait... what? Really!", "It cost 3.5 coins. Why?")] == [2, 1, 2, 3, 2]
    three = cand("It rained. It poured. What fell?", "water", "creative")
    assert first_failure(three, reject_sentence_counts=False) is None
    assert first_failure(three, reject_sentence_counts=True) == ("not_two_sentences", "3 sentences")
    assert sentence_diagnostic(three) == {"sentence_count": 3, "sentence_rule_met": False}
    assert first_failure(cand("A b c. D e f? G h.", "water", "ood"), reject_sentence_counts=True)[0] == \
        "not_one_or_two_sentences"
    assert first_failure(cand("A b c. D e f?", "water", "ood"), reject_sentence_counts=True) is None
    assert sentence_diagnostic(cand("x", "y", "facts")) == {}


def test_a_target_no_form_of_which_is_one_token_is_rejected_with_its_reason():
    paris = cand("The capital of France is ____.", "Paris")
    assert first_token_failure(paris, [(12, 7), (3,), (12, 7, 9)]) is None
    assert first_token_failure(paris, [(12, 7), (12, 7, 9)]) == (
        "target_multi_token", "every written form of 'Paris' takes 2 tokens or more")
    assert first_token_failure(paris, [])[0] == "target_multi_token"


@pytest.mark.parametrize("schema", [ValidatorReply] + [g.reply_schema for g in GENERATORS.values()])
def test_reply_schemas_refuse_text_that_says_nothing(schema):
    """Every text field the schema requires has a pattern a decoder enforces and validation checks."""
    properties = schema.model_json_schema()["properties"]
    texts = [name for name in schema.model_json_schema()["required"] if "enum" not in properties[name] and (
        properties[name].get("type") == "string" or properties[name].get("items", {}).get("type") == "string")]
    assert texts
    for name in texts:
        pattern = properties[name].get("pattern") or properties[name]["items"]["pattern"]
        assert pattern == r"^\S(.*\S)?$"


def test_an_empty_reply_is_refused_by_the_schema_and_says_nothing():
    with pytest.raises(ValidationError, match="best_one_word_answer"):
        reply(best_one_word_answer="")
    with pytest.raises(ValidationError, match="top3_one_word_answers"):
        reply(top3_one_word_answers=[" "])
    with pytest.raises(ValidationError, match="top3_one_word_answers"):
        reply(top3_one_word_answers=[])
    # The validator's score refuses it too, where a reply is built without validation.
    silent = ValidatorReply.model_construct(**{**reply().model_dump(), "best_one_word_answer": "",
                                               "top3_one_word_answers": [""]})
    assert validation.v_score(silent, "Paris") == 0 and validation.refusal(silent, "Paris") == "empty_reply"
    empty = '{"is_one_word_answer_enforced": true, "best_one_word_answer": "", "top3_one_word_answers": [""], ' \
            '"is_X_best": true, "ambiguity_score": 1, "leaks_answer": false, "naturalness_score": 9, "comments": ""}'
    assert validation.silent_fields(empty, ValidatorReply) == ["best_one_word_answer", "top3_one_word_answers[0]"]
    assert validation.silent_fields("  ", ValidatorReply) == ["(the reply)"]
    assert validation.silent_fields('{"best_one_word_answer": "Paris"}', ValidatorReply) == []
    assert validation.silent_fields("not json", ValidatorReply) == []


def reply(**changes) -> ValidatorReply:
    base = dict(is_one_word_answer_enforced=True, best_one_word_answer="Paris", top3_one_word_answers=["Paris"],
                is_X_best=True, ambiguity_score=1, leaks_answer=False, naturalness_score=9)
    return ValidatorReply(**{**base, **changes})


def test_v_score_and_acceptance_follow_the_rubric():
    assert validation.v_score(reply(), "Paris") == 100
    assert validation.v_score(reply(top3_one_word_answers=["Paris", "Lyon"]), "Paris") == 85
    assert validation.v_score(reply(top3_one_word_answers=["Paris", "Lyon"], ambiguity_score=3), "Paris") == 70
    assert validation.v_score(reply(top3_one_word_answers=["Lyon", "Nice", "Paris"]), "Paris") == 70
    assert validation.v_score(reply(is_X_best=False), "Paris") == 60
    for hard in (dict(leaks_answer=True), dict(is_one_word_answer_enforced=False), dict(ambiguity_score=4),
                 dict(naturalness_score=6)):
        assert validation.v_score(reply(**hard), "Paris") == 0 and validation.refusal(reply(**hard), "Paris")
    assert validation.refusal(reply(), "paris") is None
    assert validation.refusal(reply(is_X_best=False), "Paris") == "target_not_best"
    assert validation.refusal(reply(best_one_word_answer="Lyon"), "Paris") == "best_answer_differs"
    assert validation.s_score(85, 0.25) == 110.0


def test_bins_are_half_open_and_the_last_closed():
    assert [bins.bin_index(p) for p in (0.0, 0.199, 0.2, 0.4, 0.6, 0.79, 0.8, 1.0, 1.5, -0.1)] == \
        [0, 0, 1, 2, 3, 3, 4, 4, 4, 0]


def scored(key, p0, v=100, target=None, category="facts", accepted=True):
    return bins.Scored(key=key, category=category, target=target or key, p0=p0, s=v + 100 * p0, accepted=accepted)


def test_the_first_threshold_whose_bins_hold_n_wins():
    # Two per bin wanted (N=10): bins [.2,.4) .. [.8,1] hold 2 each at tau 0.20 (8); lowering to 0.10 adds
    # the two prompts in [0.1, 0.2), filling the first bin.
    items = [scored(f"p{i}", p) for i, p in enumerate([0.9, 0.85, 0.7, 0.65, 0.5, 0.45, 0.3, 0.25, 0.15, 0.12, 0.02])]
    selection = bins.select_category("facts", items, 10, bins.TargetTracker(), best_of_target=False)
    assert selection.tau == 0.10
    assert [i.key for i in selection.chosen] == [f"p{i}" for i in range(10)]
    assert selection.shortfalls == [] and selection.bin_shortfalls == {}


def test_a_full_bin_keeps_its_highest_s_and_the_rest_fills_by_s():
    # Everything sits in the top bin: balancing keeps 2 of them (N=10, 2 per bin) at every tau, so the
    # lowest tau is logged short and the next-highest S fill the remaining 8 places.
    items = [scored(f"p{i}", 0.99 - i * 0.01) for i in range(12)]
    selection = bins.select_category("facts", items, 10, bins.TargetTracker(), best_of_target=False)
    assert selection.tau is None
    assert [e["step"] for e in selection.shortfalls] == ["gating", "fill_by_s"]
    assert selection.shortfalls[0]["have"] == 2 and selection.shortfalls[1]["filled"] == 8
    assert selection.bin_shortfalls == {"0.0-0.2": 2, "0.2-0.4": 2, "0.4-0.6": 2, "0.6-0.8": 2}
    assert [i.key for i in selection.chosen] == [f"p{i}" for i in range(10)]


def test_tiny_p0_falls_back_to_the_fill_by_s_from_the_accepted():
    # A small model: every P0 under 0.05, so no threshold gates anything in.
    items = [scored("a", 0.001, v=70), scored("b", 0.004, v=70), scored("c", 0.0, v=100),
             scored("d", 0.03, v=0, accepted=False)]
    selection = bins.select_category("facts", items, 3, bins.TargetTracker(), best_of_target=False)
    assert [i.key for i in selection.chosen] == ["c", "b", "a"]
    assert [e["step"] for e in selection.shortfalls] == ["gating", "fill_by_s"]


def test_repetition_cap_then_unaccepted_fill_with_the_same_cap():
    tracker = bins.TargetTracker()
    first = bins.select_category("idioms", [scored("i1", 0.5, target="moon", category="idioms")], 1, tracker, False)
    second = bins.select_category("facts", [scored("f1", 0.5, target="moon")], 1, tracker, False)
    assert [i.key for i in first.chosen] == ["i1"] and [i.key for i in second.chosen] == ["f1"]
    # A third category may not use "moon": its best is skipped, an unaccepted prompt fills, then it is short.
    third = bins.select_category("common_sense", [
        scored("c1", 0.9, target="moon", category="common_sense"),
        scored("c2", 0.1, v=0, target="sun", category="common_sense", accepted=False),
        scored("c3", 0.2, v=0, target="moon", category="common_sense", accepted=False)], 2, tracker, False)
    assert [i.key for i in third.chosen] == ["c2"]
    assert [e["step"] for e in third.shortfalls] == ["gating", "repetition_cap",
                                                     "filled_from_unaccepted", "category_short"]


def test_creative_keeps_the_best_candidate_of_each_target():
    items = [scored("a1", 0.3, v=70, target="moon", category="creative"),
             scored("a2", 0.3, v=100, target="moon", category="creative"),
             scored("b1", 0.25, v=100, target="sun", category="creative")]
    selection = bins.select_category("creative", items, 2, bins.TargetTracker(), best_of_target=True)
    assert [i.key for i in selection.chosen] == ["a2", "b1"]


def test_the_demo_spreads_its_prompts_over_every_p0_bin_reached():
    from flawforge.pressure.demo import spread_over_bins

    p0 = [0.01, 0.02, 0.03, 0.04, 0.05, 0.25, 0.45, 0.5, 0.9, 0.06]
    # The bins take turns, highest first: 0.8-1, 0.4-0.6, 0.2-0.4, then 0-0.2 twice.
    assert spread_over_bins(p0, 6) == [0, 1, 5, 6, 7, 8]
    assert {bins.bin_index(p0[i]) for i in spread_over_bins(p0, 4)} == {0, 1, 2, 4}
    assert spread_over_bins(p0, 20) == list(range(10))
    assert spread_over_bins([0.01] * 5, 3) == [0, 1, 2]


def test_the_demo_pool_holds_every_language_question_beside_its_draw():
    from flawforge.pressure.demo import POOL_FACTOR, demo_candidates, demo_pool

    pool = demo_pool(6, 42)
    drawn = demo_candidates(6 * POOL_FACTOR, 42)
    assert pool[:len(drawn)] == drawn and len({c.candidate_id for c in pool}) == len(pool)
    languages = [c for c in pool if c.detail.get("relation") == "language"]
    assert len(languages) > 50 and len({c.target_word for c in languages}) == len(languages)
    assert "What language do people speak in Italy?" in {c.question_text for c in languages}
    assert all(first_failure(c, reject_sentence_counts=False) is None for c in pool)
