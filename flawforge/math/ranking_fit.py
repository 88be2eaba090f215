"""Fits the plausibility ranker's weights (flawforge/math/ranking_weights.json) from the human review.

    python -m flawforge.math.ranking_fit --candidates POOL/candidates.jsonl --human-review DIR [--out FILE]

POOL is a conceptual run without caps (`flawforge run math-errors --families conceptual --caps none`), so
that nearly every reviewed error has its candidate. Each decision reproduced by a candidate is an example:
accepted 1, rejected 0, with the candidate's features. The per-type quotas follow each type's accept
rate (`Ranker.quotas`). Prints the cross-validated ROC AUC (folds grouped by problem).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from flawforge.math.export import parse_candidates
from flawforge.math.ranking import (WEIGHTS_FILE, Ranker, candidate_features, cross_validated_auc, fit,
                                    accept_rates_from)
from flawforge.math.recall import labelled, read_human_review

L2 = 10.0  # the strongest shrinkage of 0.1, 1 and 10, and the best cross-validated AUC on the shared decisions


def examples(pairs) -> tuple[list[dict], list[int], list[int]]:
    rows = [candidate_features(candidate) for _, candidate in pairs]
    labels = [int(decision.status == "accepted") for decision, _ in pairs]
    groups = [decision.problem_index for decision, _ in pairs]
    return rows, labels, groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=Path, required=True)
    parser.add_argument("--human-review", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=WEIGHTS_FILE)
    args = parser.parse_args(argv)
    decisions = read_human_review(args.human_review)
    candidates = parse_candidates(args.candidates.read_text(encoding="utf-8"), str(args.candidates))
    rows, labels, groups = examples(labelled(decisions, candidates))
    accepted = Counter(d.error_type for d in decisions if d.status == "accepted")
    rejected = Counter(d.error_type for d in decisions if d.status == "rejected")
    ranker = Ranker(weights=fit(rows, labels, L2), accept_rates=accept_rates_from(accepted, rejected))
    args.out.write_text(ranker.to_json(), encoding="utf-8")
    print(json.dumps({"examples": len(rows), "accepted": sum(labels), "rejected": len(labels) - sum(labels),
                      "cross_validated_auc": round(cross_validated_auc(rows, labels, groups, l2=L2), 4),
                      "accept_rates": ranker.accept_rates}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
