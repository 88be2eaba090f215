"""Fits the plausibility ranker's weights (flawforge/math/ranking_weights.json) and the type mix's quotas
(flawforge/math/type_mix.json) from the human review and an uncapped run of the shared corpus.

    python -m flawforge.math.ranking_fit --candidates POOL/candidates.jsonl --human-review DIR

POOL is a run without caps (`flawforge run math-errors --caps none`), so that nearly every reviewed error
has its candidate. Each decision reproduced by a candidate is an example for the ranker: accepted 1,
rejected 0, with the candidate's features. The conceptual target mix is the accepted errors counted by
type; the computational target is kept as type_mix.json records it (see its source). The quotas are
fitted to the candidates each problem of the pool offers (flawforge.math.type_mix.fit_quotas); a family the
pool holds no candidate of (a `--families conceptual` run) keeps the quotas type_mix.json has. Prints
the cross-validated ROC AUC (folds grouped by problem) and the quotas.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from flawforge.math.export import parse_candidates
from flawforge.math.ranking import L2, WEIGHTS_FILE, Ranker, cross_validated_auc, fit
from flawforge.math.recall import examples, labelled, read_human_review
from flawforge.math.type_mix import DEFAULT_PER_TYPE, MIX_FILE, TYPES, TypeMix, fit_quotas

def offered(candidates) -> dict[str, list[int]]:
    """Each error type's number of candidates on each problem of the run."""
    per_problem: dict[tuple, Counter] = {}
    for candidate in candidates:
        problem = (candidate.problem_index, candidate.template_model)
        per_problem.setdefault(problem, Counter())[candidate.error_type] += 1
    return {t: [counts[t] for counts in per_problem.values()] for types in TYPES.values() for t in types}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=Path, required=True)
    parser.add_argument("--human-review", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=WEIGHTS_FILE)
    parser.add_argument("--mix-out", type=Path, default=MIX_FILE)
    args = parser.parse_args(argv)
    decisions = read_human_review(args.human_review)
    candidates = parse_candidates(args.candidates.read_text(encoding="utf-8"), str(args.candidates))
    rows, labels, groups = examples(labelled(decisions, candidates))
    args.out.write_text(Ranker(weights=fit(rows, labels, L2)).to_json(), encoding="utf-8")

    data = json.loads(MIX_FILE.read_text(encoding="utf-8"))
    accepted = Counter(d.error_type for d in decisions if d.status == "accepted")
    data["target"]["conceptual"]["counts"] = {t: accepted[t] for t in sorted(TYPES["conceptual"])}
    mix = TypeMix(target_counts={f: data["target"][f]["counts"] for f in TYPES}, quotas={})
    available = offered(candidates)
    quotas = dict(data["quotas"])
    for family, types in TYPES.items():
        if any(sum(available[t]) for t in types):  # a family the pool was not run for keeps its quotas
            quotas.update(fit_quotas({t: available[t] for t in types}, mix.target(family), DEFAULT_PER_TYPE[family]))
    data["quotas"] = dict(sorted(quotas.items()))
    args.mix_out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"examples": len(rows), "accepted": sum(labels), "rejected": len(labels) - sum(labels),
                      "cross_validated_auc": round(cross_validated_auc(rows, labels, groups, l2=L2), 4),
                      "quotas": data["quotas"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
