"""The plausibility ranker: its fit, its measures, and the shipped weights."""
from __future__ import annotations

import math

from flawforge.math.ranking import (cross_validated_auc, features, fit, grouped_folds, quotas_from, roc_auc,
                                    shipped_ranker)
from flawforge.proto.math import CONCEPTUAL_TYPES


def row(error_type: str, flawed_answer, correct_answer=100) -> dict:
    return features(error_type=error_type, correct_answer=correct_answer, flawed_answer=flawed_answer,
                    correct_value=4, flawed_value=5, position=0.5)


def test_features_read_the_mutant():
    whole, fractional = row("operator_swap", 120), row("operator_swap", 120.5)
    assert whole["answer_whole"] == 1 and fractional["answer_whole"] == 0
    assert whole["type=operator_swap"] == 1 and whole["type=incomplete_calculation"] == 0
    assert math.isclose(row("operator_swap", 1000)["answer_change"], 1.0)
    assert row("operator_swap", 50)["answer_smaller"] == 1


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


def test_shipped_weights_prefer_whole_answers_and_quotas_cover_every_type():
    ranker = shipped_ranker()
    assert ranker.score(row("operator_swap", 120)) > ranker.score(row("operator_swap", 120.5))
    assert set(ranker.quotas) == set(CONCEPTUAL_TYPES) and all(q >= 1 for q in ranker.quotas.values())
    assert quotas_from({"a": 0}, {}, 2) == {t: 1 for t in CONCEPTUAL_TYPES}
    assert quotas_from({"operator_swap": 9}, {"operator_swap": 1}, 2)["operator_swap"] == 2
