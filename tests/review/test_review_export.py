"""The final dataset from reviewed candidates: majority verdicts, edits, class sizes, split by problem."""
from __future__ import annotations

import pytest
from review_support import make_round

from flawforge.blobstore import LocalBlobStore
from flawforge.math.export import ExportError, dataset_row
from flawforge.proto.review import DecisionRequest
from flawforge.review.export import accepted_items, build_final_dataset
from flawforge.review.store import ReviewStore


@pytest.fixture
def reviewed(tmp_path, candidates, questions):
    """A round of 10 real candidates judged by three reviewers with a known pattern of verdicts."""
    reviews = ReviewStore(LocalBlobStore(tmp_path))
    items = make_round(reviews, candidates, questions, size=2, reviewers_per_item=3)
    verdicts = {  # item order -> (ana, ben, cho)
        0: ("accept", "accept", "reject"),   # majority accept
        1: ("accept", "reject", None),       # tie: out
        2: ("edit", "accept", None),         # in, with ana's text
        3: ("reject", "reject", "accept"),   # majority reject
        4: ("skip", "accept", None),         # one verdict, accepted
        5: ("skip", None, None),             # no verdict
    }
    for order, kinds in verdicts.items():
        item = items[order]
        for reviewer, kind in zip(("ana", "ben", "cho"), kinds):
            if kind is None:
                continue
            text = item.candidate.flawed_solution.replace("\n", " (reviewed)\n", 1) if kind == "edit" else None
            reviews.decide("r1", item.item_id, reviewer,
                           DecisionRequest(candidate_id=item.item_id, kind=kind, edited_solution=text))
    return items, reviews.decisions("r1")


def test_majority_of_verdicts_decides_and_the_earliest_edit_replaces_the_text(reviewed):
    items, decisions = reviewed
    accepted = {c.id: (c, source) for c, source in accepted_items(items, decisions)}
    assert set(accepted) == {items[0].item_id, items[2].item_id, items[4].item_id}
    edited, source = accepted[items[2].item_id]
    assert source == "human-edited" and " (reviewed)\n" in edited.flawed_solution
    assert edited.flawed_solution != items[2].candidate.flawed_solution
    assert accepted[items[0].item_id] == (items[0].candidate, "human-reviewed")
    assert {c.id for c, _ in accepted_items(items, decisions, min_verdicts=2)} == {items[0].item_id, items[2].item_id}


def test_dataset_rows_split_by_problem_with_class_sizes(reviewed, problems, candidates):
    items, decisions = reviewed
    conceptual = accepted_items(items, decisions)
    splits = build_final_dataset(conceptual=conceptual, computational=[], problems=problems,
                                 sizes={"correct": 2}, test_fraction=0.5, seed=3)
    rows = splits["train"] + splits["test"]
    assert sorted(r["family"] for r in rows) == ["conceptual"] * 3 + ["correct"] * 2
    sides = {}
    for row in rows:
        assert sides.setdefault(row["problem_index"], row["split"]) == row["split"]
    assert splits["train"] and splits["test"]
    edited = next(r for r in rows if r["source"] == "human-edited")
    assert " (reviewed)" in edited["flawed_solution"]
    # Conceptual rows are the math export's rows, with the review as their source.
    candidate = next(c for c, _ in conceptual if c.id == items[0].item_id)
    row = next(r for r in rows if r["id"] == candidate.id)
    assert row == {**dataset_row(candidate, problems[candidate.problem_index], row["split"]), "source": "human-reviewed"}
    correct = [r for r in rows if r["family"] == "correct"]
    assert all(r["flawed_solution"] is None and r["correct_solution"] == problems[r["problem_index"]].answer
               for r in correct)
    assert {r["problem_index"] for r in correct} <= {c.problem_index for c, _ in conceptual}
    assert build_final_dataset(conceptual=conceptual, computational=[], problems=problems, sizes={"correct": 2},
                               test_fraction=0.5, seed=3) == splits


def test_bad_export_input_is_named(reviewed, problems, candidates):
    items, decisions = reviewed
    conceptual = accepted_items(items, decisions)
    with pytest.raises(ExportError, match="unknown class"):
        build_final_dataset(conceptual=conceptual, computational=[], problems=problems, sizes={"flawed": 1},
                            test_fraction=0.2, seed=0)
    with pytest.raises(ExportError, match="not computational"):
        build_final_dataset(conceptual=[], computational=candidates[:1], problems=problems, sizes={},
                            test_fraction=0.2, seed=0)
    with pytest.raises(ExportError, match="does not have"):
        build_final_dataset(conceptual=conceptual, computational=[], problems=problems[:5], sizes={},
                            test_fraction=0.2, seed=0)
