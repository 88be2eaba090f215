"""The plausibility ranker: its fit, its measures, and the shipped weights."""
from __future__ import annotations

import math

from flawforge.math import generate
from flawforge.math.generate import generate_for_problem
from flawforge.math.ranking import (candidate_features, cross_validated_auc, features, fit, grouped_folds, names_read,
                                    roc_auc, shipped_ranker, world_knowledge_names)
from flawforge.math.selection import NO_CAPS
from flawforge.math.templates import problem_template

GEMINI = "google_gemini-2.5-flash"


def row(error_type: str, flawed_answer, correct_answer=100) -> dict:
    return features(error_type=error_type, correct_answer=correct_answer, flawed_answer=flawed_answer,
                    correct_value=4, flawed_value=5, position=0.5, params={}, reads={}, world_knowledge=())


def letters(folder, problems, sandbox, monkeypatch):
    """Problem 4's conceptual candidates (James writes a 3-page letter to 2 friends twice a week, `weeks_per_year =
    52  # WK`), each with the features the generator ranked its mutant by."""
    code, steps = folder.files("tier1", 4, GEMINI).read()
    ranked = {}
    choice = generate._choice

    def spy(group, ranker, bound, place):
        mutant, outcome = group[0]
        ranked[(mutant.mutation.name, mutant.line, str(sorted(mutant.edit.params.items())))] = features(
            error_type=mutant.mutation.name, correct_answer=bound.answer, flawed_answer=outcome.answer,
            correct_value=mutant.site.value, flawed_value=outcome.values.get(mutant.site.target),
            position=place.of(mutant), params=mutant.edit.params, reads=names_read(mutant.edit.expression),
            world_knowledge=place.world_knowledge)
        return choice(group, ranker, bound, place)

    monkeypatch.setattr(generate, "_choice", spy)
    template = problem_template(problems[4], "tier1", GEMINI, code, steps)
    output = generate_for_problem(template, sandbox, ["conceptual"], seed=1, caps=NO_CAPS)
    return [(c, ranked.get((c.error_type, c.erroneous_line_number,
                            str(sorted((k, v) for k, v in c.mutation.items() if k != "name")))))
            for c in output.candidates]


def test_features_read_the_mutant():
    whole, fractional = row("operator_swap", 120), row("operator_swap", 120.5)
    assert whole["answer_whole"] == 1 and fractional["answer_whole"] == 0
    assert whole["type=operator_swap"] == 1 and whole["type=incomplete_calculation"] == 0
    assert math.isclose(row("operator_swap", 1000)["answer_change"], 1.0)
    assert row("operator_swap", 50)["answer_smaller"] == 1


def test_world_knowledge_names_are_the_variables_marked_wk():
    code = "def solve():\n    rate = 12  # $12 an hour\n    minutes_per_hour = 60 # WK\n    x = rate / minutes_per_hour\n"
    assert world_knowledge_names(code) == {"minutes_per_hour"}


def test_substitutions_that_repeat_an_operand_and_world_knowledge_on_a_real_template(folder, problems, sandbox,
                                                                                     monkeypatch):
    candidates = letters(folder, problems, sandbox, monkeypatch)
    by_replacement = {c.mutation["replacement"]: candidate_features(c) for c, _ in candidates
                      if c.error_type == "incorrect_operand" and c.mutation["operand"] == "pages_per_friend_per_week"}
    # pages_per_friend_per_week * num_friends: "2 x 2 pages a week" reads the friends twice
    assert by_replacement["num_friends"]["repeats_operand"] == 1
    assert by_replacement["pages_per_letter"]["repeats_operand"] == 0
    # neither substitution of the second step touches the weeks in a year, a world-knowledge constant
    assert by_replacement["num_friends"]["world_knowledge"] == 0
    assert by_replacement["pages_per_letter"]["world_knowledge"] == 0
    # total_pages_per_year = total_pages_per_week * weeks_per_year: any error in that step involves the constant
    third = [c for c, _ in candidates if c.target_variable == "total_pages_per_year"]
    assert third and all(candidate_features(c)["world_knowledge"] == 1 for c in third)


def test_the_generator_ranks_a_mutant_by_the_features_of_the_candidate_it_becomes(folder, problems, sandbox,
                                                                                   monkeypatch):
    candidates = letters(folder, problems, sandbox, monkeypatch)
    compared = [(candidate_features(c), ranked) for c, ranked in candidates if ranked is not None]
    assert len(compared) >= 4
    assert all(mine == ranked for mine, ranked in compared)


def test_auc_and_folds():
    assert roc_auc([3, 2, 1], [1, 1, 0]) == 1.0 and roc_auc([1, 2, 3], [1, 1, 0]) == 0.0
    assert roc_auc([1, 1], [1, 0]) == 0.5
    folds = grouped_folds([7, 7, 8, 9, 8], 2)
    assert folds[0] == folds[1] and folds[2] == folds[4]


def test_fit_learns_what_separates_the_labels_and_is_deterministic():
    rows = [row("operator_swap", 120 + k) for k in range(20)] + [row("operator_swap", 120.5 + k) for k in range(20)]
    labels = [1] * 20 + [0] * 20
    weights = fit(rows, labels)
    assert weights == fit(rows, labels)
    assert weights["answer_whole"] > 0
    assert cross_validated_auc(rows, labels, list(range(40))) == 1.0


def test_shipped_weights_prefer_whole_answers():
    ranker = shipped_ranker()
    assert ranker.score(row("operator_swap", 120)) > ranker.score(row("operator_swap", 120.5))
    assert ranker.weights["repeats_operand"] < 0 and ranker.weights["world_knowledge"] < 0
