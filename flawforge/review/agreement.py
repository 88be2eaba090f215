"""Agreement between reviewers (Cohen's and Fleiss' kappa) and per-reviewer accept rates.

Verdicts are binary: accept (an edit is an accept with changes) or reject; skips say nothing
about the item and are left out.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from itertools import combinations
from typing import Iterable

from flawforge.proto.review import AgreementReport, Decision, ErrorTypeAgreement, PairAgreement, ReviewerStats

MIN_ITEMS_FOR_KAPPA = 2


def verdict(decision: Decision) -> str | None:
    return {"accept": "accept", "edit": "accept", "reject": "reject"}.get(decision.kind)


def cohen_kappa(pairs: list[tuple[str, str]]) -> tuple[float | None, float | None]:
    """(observed agreement, kappa) of two raters' labels on the same items; kappa None if undefined."""
    if not pairs:
        return None, None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    expected = sum(first[label] * second[label] for label in set(first) | set(second)) / (n * n)
    kappa = None if n < MIN_ITEMS_FOR_KAPPA or expected == 1 else (observed - expected) / (1 - expected)
    return observed, kappa


def fleiss_kappa(items: list[Counter]) -> tuple[float | None, float | None]:
    """(mean observed agreement, kappa) over items rated by two or more raters, raters may vary per item.

    Each Counter maps label -> number of raters who chose it. Per item, agreement is the share of
    agreeing rater pairs; chance agreement comes from the pooled label proportions.
    """
    rated = [counts for counts in items if sum(counts.values()) >= 2]
    if not rated:
        return None, None
    per_item = []
    for counts in rated:
        n = sum(counts.values())
        per_item.append(sum(c * (c - 1) for c in counts.values()) / (n * (n - 1)))
    observed = sum(per_item) / len(per_item)
    totals: Counter = Counter()
    for counts in rated:
        totals.update(counts)
    all_ratings = sum(totals.values())
    expected = sum((count / all_ratings) ** 2 for count in totals.values())
    kappa = None if len(rated) < MIN_ITEMS_FOR_KAPPA or expected == 1 else (observed - expected) / (1 - expected)
    return observed, kappa


def _type_agreement(error_type: str, item_votes: dict[str, Counter]) -> ErrorTypeAgreement:
    observed, kappa = fleiss_kappa(list(item_votes.values()))
    multi = sum(1 for votes in item_votes.values() if sum(votes.values()) >= 2)
    note = ""
    if multi < MIN_ITEMS_FOR_KAPPA:
        note = f"kappa needs at least {MIN_ITEMS_FOR_KAPPA} items with two or more verdicts; {multi} here"
    elif kappa is None:
        note = "kappa undefined: every verdict has the same label"
    return ErrorTypeAgreement(error_type=error_type, items=len(item_votes), items_multi_rated=multi,
                              observed_agreement=observed, fleiss_kappa=kappa, note=note)


def agreement_report(round_name: str, decisions: Iterable[Decision]) -> AgreementReport:
    decisions = list(decisions)
    stats: dict[str, Counter] = defaultdict(Counter)
    # item -> reviewer -> verdict; the store keeps one decision per reviewer and item.
    labels: dict[str, dict[str, str]] = defaultdict(dict)
    error_type_of: dict[str, str] = {}
    for decision in decisions:
        stats[decision.reviewer][decision.kind] += 1
        label = verdict(decision)
        if label is not None:
            labels[decision.item_id][decision.reviewer] = label
            error_type_of[decision.item_id] = decision.error_type

    reviewers = []
    for name in sorted(stats):
        counts = stats[name]
        judged = counts["accept"] + counts["edit"] + counts["reject"]
        reviewers.append(ReviewerStats(
            reviewer=name, decisions=sum(counts.values()), accepted=counts["accept"], edited=counts["edit"],
            rejected=counts["reject"], skipped=counts["skip"],
            accept_rate=(counts["accept"] + counts["edit"]) / judged if judged else None))

    votes = {item: Counter(by_reviewer.values()) for item, by_reviewer in labels.items()}
    by_type: dict[str, dict[str, Counter]] = defaultdict(dict)
    for item, counts in votes.items():
        by_type[error_type_of[item]][item] = counts

    pairs = []
    for a, b in combinations(sorted({r for by_reviewer in labels.values() for r in by_reviewer}), 2):
        shared = [(by_reviewer[a], by_reviewer[b]) for by_reviewer in labels.values()
                  if a in by_reviewer and b in by_reviewer]
        if shared:
            observed, kappa = cohen_kappa(shared)
            pairs.append(PairAgreement(reviewer_a=a, reviewer_b=b, items=len(shared),
                                       observed_agreement=observed, cohen_kappa=kappa))

    overall = _type_agreement("all", votes)
    return AgreementReport(
        round=round_name, decisions=len(decisions), verdicts=sum(len(v) for v in labels.values()),
        items=len(votes), items_multi_rated=overall.items_multi_rated,
        by_error_type=[_type_agreement(t, by_type[t]) for t in sorted(by_type)],
        reviewers=reviewers, pairs=pairs, overall=overall)
