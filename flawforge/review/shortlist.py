"""Choosing the candidates people review: per error type, stratified by tier and error position."""
from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from typing import Callable, Iterable, Mapping

from flawforge.errors import FlawforgeError
from flawforge.proto.math import Candidate
from flawforge.proto.review import ReviewItem, Stratum
from flawforge.review.lines import code_diff, error_position, line_index


class ShortlistError(FlawforgeError):
    pass


def stratum_of(candidate: Candidate) -> Stratum:
    return Stratum(error_type=candidate.error_type, tier=candidate.tier,
                   position=error_position(candidate.flawed_solution, candidate.erroneous_line_number))


def _rng(seed: int, *parts: str) -> random.Random:
    # Derived from a digest, not hash(): the same seed gives the same shortlist in every process.
    digest = hashlib.sha256(":".join([str(seed), *parts]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def select(candidates: Iterable[Candidate], size_per_error_type: int, seed: int,
           family: str = "conceptual") -> list[tuple[Candidate, Stratum]]:
    """Up to `size_per_error_type` candidates of each error type of `family`.

    Each error type's strata (tier x early/middle/late) are shuffled with the seed and drawn from
    in turn, so rare strata are represented rather than swamped. The result interleaves error
    types; it depends only on the candidate set and the seed, not on the input order.
    """
    if size_per_error_type < 1:
        raise ShortlistError(f"size_per_error_type must be at least 1, got {size_per_error_type}")
    by_id: dict[str, Candidate] = {}
    for candidate in candidates:
        if candidate.id in by_id:
            raise ShortlistError(f"candidate id {candidate.id!r} appears twice")
        by_id[candidate.id] = candidate
    strata: dict[str, dict[tuple[str, str], list[tuple[Candidate, Stratum]]]] = defaultdict(lambda: defaultdict(list))
    for candidate_id in sorted(by_id):
        candidate = by_id[candidate_id]
        if candidate.family != family:
            continue
        try:
            stratum = stratum_of(candidate)
        except ValueError as exc:
            raise ShortlistError(f"candidate {candidate_id}: {exc}") from None
        strata[candidate.error_type][(stratum.tier, stratum.position)].append((candidate, stratum))

    per_type: list[list[tuple[Candidate, Stratum]]] = []
    for error_type in sorted(strata):
        cells = strata[error_type]
        queues = []
        for key in sorted(cells):
            cell = list(cells[key])
            _rng(seed, error_type, *key).shuffle(cell)
            queues.append(cell)
        _rng(seed, error_type).shuffle(queues)
        chosen: list[tuple[Candidate, Stratum]] = []
        while len(chosen) < size_per_error_type and any(queues):
            for queue in queues:
                if queue and len(chosen) < size_per_error_type:
                    chosen.append(queue.pop())
        per_type.append(chosen)
    interleaved = []
    for rank in range(max((len(chosen) for chosen in per_type), default=0)):
        interleaved.extend(chosen[rank] for chosen in per_type if rank < len(chosen))
    return interleaved


def candidate_sha256(candidate: Candidate) -> str:
    return hashlib.sha256(candidate.model_dump_json().encode()).hexdigest()


def review_items(selected: list[tuple[Candidate, Stratum]], questions: Mapping[int, str],
                 template_code: Callable[[Candidate], str | None] = lambda candidate: None) -> list[ReviewItem]:
    """Freezes the selection into review items with what the page shows."""
    items = []
    for order, (candidate, stratum) in enumerate(selected):
        question = questions.get(candidate.problem_index)
        if question is None:
            raise ShortlistError(f"candidate {candidate.id}: no question for problem {candidate.problem_index}")
        label = candidate.erroneous_line_number
        items.append(ReviewItem(
            item_id=candidate.id, order=order, stratum=stratum, question=question, candidate=candidate,
            candidate_sha256=candidate_sha256(candidate),
            flawed_line_index=line_index(candidate.flawed_solution, label),
            original_line_index=line_index(candidate.original_solution, label),
            code_diff=code_diff(template_code(candidate) or "", candidate.mutated_code)))
    return items
