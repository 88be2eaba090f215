"""A separate process reviewing a round until nothing is left for it (the cross-process race)."""
from __future__ import annotations

import sys

from flawforge.blobstore import LocalBlobStore
from flawforge.proto.review import DecisionRequest
from flawforge.review.store import ReviewConflict, ReviewStore


def review_all(blob_dir: str, round_name: str, reviewer: str) -> int:
    reviews = ReviewStore(LocalBlobStore(blob_dir))
    recorded = 0
    while (assignment := reviews.next_item(round_name, reviewer)) is not None:
        kind = "accept" if assignment.item.order % 3 else "reject"
        try:
            reviews.decide(round_name, assignment.item.item_id, reviewer,
                           DecisionRequest(candidate_id=assignment.item.candidate.id, kind=kind))
            recorded += 1
        except ReviewConflict:
            pass  # the same reviewer in another process decided this item first
    return recorded


if __name__ == "__main__":
    print(review_all(*sys.argv[1:4]))
