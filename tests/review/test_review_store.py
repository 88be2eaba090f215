"""The review rules on the blob store: claims, decisions, N reviewers, races, restarts."""
from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from review_support import make_round

from flawforge.blobstore import LocalBlobStore
from flawforge.proto.review import DecisionRequest
from flawforge.review.store import ReviewConflict, ReviewInvalid, ReviewNotFound, ReviewStore


class Clock:
    """Time the test moves forward explicitly, for claim expiry."""

    def __init__(self):
        self.now = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def reviews(tmp_path) -> ReviewStore:
    return ReviewStore(LocalBlobStore(tmp_path / "blobs"))


def decide(reviews, round_name, assignment_or_item, reviewer, kind="accept", **extra):
    item = getattr(assignment_or_item, "item", assignment_or_item)
    return reviews.decide(round_name, item.item_id, reviewer,
                          DecisionRequest(candidate_id=item.candidate.id, kind=kind, **extra))


def counted(reviews, round_name):
    return Counter(d.item_id for d in reviews.decisions(round_name) if d.kind != "skip")


def test_a_reviewer_sees_every_item_once_then_nothing(reviews, candidates, questions):
    items = make_round(reviews, candidates, questions, size=2)
    seen = []
    while (assignment := reviews.next_item("r1", "ana")) is not None:
        seen.append(assignment.item.item_id)
        decide(reviews, "r1", assignment, "ana", "skip" if len(seen) % 4 == 0 else "accept")
    assert sorted(seen) == sorted(item.item_id for item in items) and len(seen) == 10
    assert reviews.progress("r1", "ana").reviewer_available == 0


def test_items_needing_more_reviewers_come_first(reviews, candidates, questions):
    items = make_round(reviews, candidates, questions, size=2, reviewers_per_item=2)
    first = reviews.next_item("r1", "ana")
    assert first.item.item_id == items[0].item_id
    decide(reviews, "r1", first, "ana")
    # Item 0 has one review now; ben gets the next item nobody has reviewed, in shortlist order.
    assert reviews.next_item("r1", "ben").item.item_id == items[1].item_id
    # An item someone is still looking at counts as taken too.
    assert reviews.next_item("r1", "cho").item.item_id == items[2].item_id


def test_n_reviewers_per_item_then_the_item_is_full(reviews, candidates, questions):
    items = make_round(reviews, candidates, questions, size=1, reviewers_per_item=2)
    for reviewer in ("ana", "ben"):
        while (assignment := reviews.next_item("r1", reviewer)) is not None:
            decide(reviews, "r1", assignment, reviewer)
    assert counted(reviews, "r1") == {item.item_id: 2 for item in items}
    assert reviews.next_item("r1", "cho") is None
    with pytest.raises(ReviewConflict, match="no open review slot"):
        decide(reviews, "r1", items[0], "cho", "reject")
    progress = reviews.progress("r1")
    assert (progress.items_complete, progress.reviews_done, progress.reviews_needed) == (5, 10, 10)


def test_a_skip_is_recorded_and_frees_the_slot_for_someone_else(reviews, candidates, questions):
    items = make_round(reviews, candidates, questions, size=1, reviewers_per_item=1)
    assignment = reviews.next_item("r1", "ana")
    decide(reviews, "r1", assignment, "ana", "skip", comment="cannot tell")
    assert all(reviews.next_item("r1", "ana").item.item_id != assignment.item.item_id for _ in range(3))
    assert decide(reviews, "r1", assignment, "ben", "reject").generation == 1
    log = [(d.reviewer, d.kind, d.comment) for d in reviews.decisions("r1") if d.item_id == assignment.item.item_id]
    assert log == [("ana", "skip", "cannot tell"), ("ben", "reject", "")]
    assert counted(reviews, "r1")[items[0].item_id] == 1


def test_undo_withdraws_the_last_decision_and_gives_its_item_back(reviews, candidates, questions):
    make_round(reviews, candidates, questions, size=1, reviewers_per_item=1)
    first = reviews.next_item("r1", "ana")
    decide(reviews, "r1", first, "ana", "accept")
    second = reviews.next_item("r1", "ana")
    decide(reviews, "r1", second, "ana", "reject")
    held = reviews.next_item("r1", "ana")  # the page loads the next item at once
    back = reviews.undo_last("r1", "ana")
    assert back.item.item_id == second.item.item_id and back.claim.reopens == second.claim.generation
    assert [d.item_id for d in reviews.decisions("r1")] == [first.item.item_id]
    assert back.progress.reviews_done == 1 and counted(reviews, "r1")[second.item.item_id] == 0
    with pytest.raises(ReviewConflict, match="undone already: decide that item again first"):
        reviews.undo_last("r1", "ana")  # one step back, not two
    assert reviews.next_item("r1", "ben").item.item_id not in (second.item.item_id, held.item.item_id)
    redone = decide(reviews, "r1", back, "ana", "accept")
    assert (redone.slot, redone.generation) == (second.claim.slot, second.claim.generation + 1)
    assert [(d.item_id, d.kind) for d in reviews.decisions("r1", "ana")] == [
        (first.item.item_id, "accept"), (second.item.item_id, "accept")]
    # The withdrawn reject is still stored, out of every count; the held item is still ana's.
    assert [d.kind for d in reviews.item_state("r1", second.item.item_id).recorded()] == ["reject", "accept"]
    assert reviews.next_item("r1", "ana").item.item_id == held.item.item_id
    fresh = ReviewStore(reviews.store)  # another process reads the same
    assert [d.kind for d in fresh.decisions("r1", "ana")] == ["accept", "accept"]
    assert fresh.progress("r1").reviews_done == 2


def test_undo_of_a_skip_the_next_reviewer_took_is_refused_and_bad_undos_are_named(reviews, candidates, questions):
    make_round(reviews, candidates, questions, size=1, reviewers_per_item=1)
    with pytest.raises(ReviewNotFound, match="no decision to undo"):
        reviews.undo_last("r1", "ana")
    with pytest.raises(ReviewNotFound, match="no review round 'nope'"):
        reviews.undo_last("nope", "ana")
    skipped = reviews.next_item("r1", "ana")
    decide(reviews, "r1", skipped, "ana", "skip")
    decide(reviews, "r1", skipped, "ben", "accept")
    with pytest.raises(ReviewConflict, match="taken up by another reviewer after the skip of 'ana'"):
        reviews.undo_last("r1", "ana")
    assert [(d.reviewer, d.kind) for d in reviews.decisions("r1")] == [("ana", "skip"), ("ben", "accept")]


def test_decisions_are_imported_only_into_a_round_that_exists(reviews, decision_rows):
    from flawforge.review.legacy import legacy_decisions

    decisions = legacy_decisions(decision_rows, datetime.now(timezone.utc))
    with pytest.raises(ReviewNotFound, match="no review round 'legacy'"):
        reviews.import_decisions("legacy", decisions, source="import:decisions.csv")
    assert list(reviews.store.list("review/")) == []  # nothing written for a round nobody shortlisted


def test_a_decision_is_never_overwritten(reviews, candidates, questions):
    make_round(reviews, candidates, questions)
    assignment = reviews.next_item("r1", "ana")
    first = decide(reviews, "r1", assignment, "ana", "reject")
    for kind in ("accept", "reject", "skip"):
        with pytest.raises(ReviewConflict, match="already decided"):
            decide(reviews, "r1", assignment, "ana", kind)
    assert reviews.decisions("r1", "ana") == [first]


def test_the_decision_must_name_the_shortlisted_candidate(reviews, candidates, questions):
    items = make_round(reviews, candidates, questions)
    with pytest.raises(ReviewConflict, match="reload the item"):
        reviews.decide("r1", items[0].item_id, "ana", DecisionRequest(candidate_id=items[1].item_id, kind="accept"))
    with pytest.raises(ReviewNotFound, match="no item"):
        reviews.decide("r1", "legacy-0000", "ana", DecisionRequest(candidate_id="x", kind="accept"))
    with pytest.raises(ReviewNotFound, match="no review round"):
        reviews.next_item("r9", "ana")
    assert reviews.decisions("r1") == []


def test_an_edit_keeps_the_text_and_its_line_diff(reviews, candidates, questions):
    make_round(reviews, candidates, questions)
    assignment = reviews.next_item("r1", "ana")
    generated = assignment.item.candidate.flawed_solution.splitlines()
    index = assignment.item.flawed_line_index
    edited = generated[:index] + [generated[index] + " (so far)"] + generated[index + 1:]
    with pytest.raises(ReviewInvalid, match="identical"):
        decide(reviews, "r1", assignment, "ana", "edit", edited_solution="\n".join(generated))
    with pytest.raises(ReviewInvalid, match="only allowed with kind 'edit'"):
        decide(reviews, "r1", assignment, "ana", "accept", edited_solution="\n".join(edited))
    decision = decide(reviews, "r1", assignment, "ana", "edit", edited_solution="\n".join(edited))
    assert decision.edited_solution == "\n".join(edited)
    assert [(c.op, c.generated_lines, c.edited_lines) for c in decision.line_diff] == \
        [("replace", [generated[index]], [edited[index]])]
    assert decision.edited_lines == [assignment.item.candidate.erroneous_line_number]


def test_a_reloaded_page_gets_its_open_claim_back(reviews, candidates, questions):
    make_round(reviews, candidates, questions)
    first = reviews.next_item("r1", "ana")
    assert reviews.next_item("r1", "ana").claim == first.claim


def test_an_expired_claim_is_taken_over_and_its_late_decision_refused(tmp_path, candidates, questions):
    clock = Clock()
    reviews = ReviewStore(LocalBlobStore(tmp_path), claim_ttl_s=600, clock=clock)
    make_round(reviews, candidates, questions, size=1, reviewers_per_item=1)
    held = reviews.next_item("r1", "ana")
    clock.now += timedelta(seconds=599)
    assert reviews.next_item("r1", "ben").item.item_id != held.item.item_id
    clock.now += timedelta(seconds=2)
    taken = reviews.next_item("r1", "cho")
    assert taken.item.item_id == held.item.item_id and taken.claim.generation == 1
    with pytest.raises(ReviewConflict, match="expired and was taken over"):
        decide(reviews, "r1", held, "ana")
    decide(reviews, "r1", taken, "cho")
    assert counted(reviews, "r1")[held.item.item_id] == 1
    # Nobody took ben's expired claim, so his late decision still counts.
    late = reviews.next_item("r1", "ben")
    clock.now += timedelta(hours=2)
    assert decide(reviews, "r1", late, "ben").generation == 0


def test_a_restarted_store_loses_nothing(tmp_path, candidates, questions):
    before = ReviewStore(LocalBlobStore(tmp_path))
    items = make_round(before, candidates, questions, size=1)
    decided = decide(before, "r1", before.next_item("r1", "ana"), "ana")
    held = before.next_item("r1", "ana")
    after = ReviewStore(LocalBlobStore(tmp_path))  # a new process: nothing cached
    assert after.items("r1") == items and after.decisions("r1") == [decided]
    assert after.next_item("r1", "ana").claim == held.claim
    with pytest.raises(ReviewConflict, match="already exists"):
        make_round(after, candidates, questions, size=1)


def _race(reviews, round_name, reviewers, per_item):
    barrier = threading.Barrier(len(reviewers))

    def work(reviewer):
        barrier.wait()
        done = 0
        while (assignment := reviews.next_item(round_name, reviewer)) is not None:
            try:
                decide(reviews, round_name, assignment, reviewer, "accept" if done % 2 else "reject")
                done += 1
            except ReviewConflict:
                pass
        return done

    with ThreadPoolExecutor(len(reviewers)) as pool:
        return list(pool.map(work, reviewers))


def _check_race_outcome(reviews, round_name, items, per_item, recorded):
    decisions = reviews.decisions(round_name)
    assert sum(recorded) == len(decisions) == len(items) * per_item
    assert counted(reviews, round_name) == {item.item_id: per_item for item in items}
    assert max(Counter((d.item_id, d.reviewer) for d in decisions).values()) == 1


def test_reviewers_racing_in_threads_each_decision_recorded_once(reviews, candidates, questions):
    items = make_round(reviews, candidates, questions, size=2, reviewers_per_item=2)
    # Eight workers, three of them the same reviewer (one person with several tabs open).
    recorded = _race(reviews, "r1", ["ana", "ana", "ana", "ben", "cho", "dev", "eve", "fay"], per_item=2)
    _check_race_outcome(reviews, "r1", items, 2, recorded)


def test_reviewers_racing_for_one_item_on_s3(request, candidates, questions):
    from flawforge.blobstore.s3 import S3BlobStore

    store = S3BlobStore(endpoint=request.getfixturevalue("s3_server"), access_key="testing", secret_key="testing",
                        bucket=f"review-{uuid.uuid4().hex[:10]}", region="us-east-1")
    reviews = ReviewStore(store)
    items = make_round(reviews, candidates[:1], questions, size=1, reviewers_per_item=2)
    recorded = _race(reviews, "r1", ["ana", "ben", "cho", "dev", "eve", "ana"], per_item=2)
    _check_race_outcome(reviews, "r1", items, 2, recorded)


def test_reviewers_racing_in_separate_processes(tmp_path, candidates, questions):
    reviews = ReviewStore(LocalBlobStore(tmp_path))
    items = make_round(reviews, candidates, questions, size=2, reviewers_per_item=2)
    worker = Path(__file__).with_name("race_worker.py")
    processes = [subprocess.Popen([sys.executable, str(worker), str(tmp_path), "r1", name], stdout=subprocess.PIPE,
                                  text=True) for name in ("ana", "ana", "ben", "cho")]
    recorded = [int(p.communicate(timeout=120)[0]) for p in processes]
    assert all(p.returncode == 0 for p in processes)
    _check_race_outcome(ReviewStore(LocalBlobStore(tmp_path)), "r1", items, 2, recorded)
