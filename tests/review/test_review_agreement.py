"""Kappa statistics against published worked examples, and the report on the real decision log."""
from __future__ import annotations

import csv
from collections import Counter
from datetime import datetime, timezone
from fractions import Fraction

import pytest

from flawforge.review.agreement import agreement_report, cohen_kappa, fleiss_kappa
from flawforge.review.legacy import legacy_decisions


def test_cohen_kappa_of_the_textbook_two_rater_table():
    # 50 proposals: both yes 20, A yes/B no 5, A no/B yes 10, both no 15 -> p_o 0.7, p_e 0.5, kappa 0.4.
    pairs = [("y", "y")] * 20 + [("y", "n")] * 5 + [("n", "y")] * 10 + [("n", "n")] * 15
    observed, kappa = cohen_kappa(pairs)
    assert observed == pytest.approx(0.7) and kappa == pytest.approx(0.4)


def test_fleiss_kappa_of_the_published_fourteen_rater_example():
    # Fleiss (1971) style example: 10 subjects, 14 raters, 5 categories; kappa 0.210, P-bar 0.378.
    table = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
             [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    items = [Counter({category: n for category, n in enumerate(row) if n}) for row in table]
    observed, kappa = fleiss_kappa(items)
    assert observed == pytest.approx(0.378, abs=5e-4) and kappa == pytest.approx(0.210, abs=5e-4)


def test_kappa_is_undefined_not_invented():
    assert cohen_kappa([]) == (None, None)
    assert cohen_kappa([("y", "y"), ("y", "y")]) == (1.0, None)  # chance agreement is 1
    assert fleiss_kappa([Counter({"accept": 1})]) == (None, None)  # no item with two raters


def test_report_on_the_real_decision_log(shared_data, decision_rows):
    with (shared_data / "human-review" / "decisions.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    report = agreement_report("legacy", legacy_decisions(decision_rows, datetime.now(timezone.utc)))
    assert report.decisions == len(rows)
    for stats in report.reviewers:
        mine = [r for r in rows if r["validator"] == stats.reviewer]
        accepted = sum(r["status"] == "accepted" for r in mine)
        rejected = sum(r["status"] == "rejected" for r in mine)
        assert stats.accepted + stats.edited == accepted and stats.rejected == rejected
        assert stats.edited == sum(r["status"] == "accepted" and bool(r["manual_edits"]) for r in mine)
        assert stats.accept_rate == pytest.approx(accepted / (accepted + rejected))
    assert {s.reviewer for s in report.reviewers} == {r["validator"] for r in rows}
    # The original project gave each candidate one reviewer: a single candidate was judged twice,
    # so no kappa can be estimated from its log, and the report says so instead of inventing one.
    by_candidate: dict[tuple, list[str]] = {}
    for r in rows:
        if r["status"] != "skipped":
            key = (r["tier"], r["index"], r["filepath"].replace("\\", "/").rsplit("/", 1)[1], Fraction(r["flawed_value"]))
            by_candidate.setdefault(key, []).append(r["validator"])
    shared = [sorted(names) for names in by_candidate.values() if len(names) > 1]
    assert report.items_multi_rated == len(shared) == 1 and report.overall.fleiss_kappa is None
    assert "at least 2 items" in report.overall.note
    assert [[p.reviewer_a, p.reviewer_b] for p in report.pairs] == shared and report.pairs[0].cohen_kappa is None
