"""The final dataset: reviewed conceptual errors, computational errors and correct solutions.

Rows have the math export's format (flawforge.math.export.dataset_row) and its split by GSM8K
problem, taken over the problems of all three classes together so a problem never straddles
train and test. Conceptual candidates enter only with a strict majority of accepting verdicts
(an edit is an accept; the earliest edit's text replaces the generated one). Computational
candidates need no review. Correct rows are GSM8K's own solutions of the same problems, with
family 'correct' and no flawed solution.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from typing import Iterable, Mapping, Sequence

from flawforge.math.export import SOURCE, ExportError, dataset_row, held_out_problems
from flawforge.math.gsm8k import GSM8KProblem
from flawforge.proto.math import Candidate
from flawforge.proto.review import Decision, ReviewItem
from flawforge.review.agreement import verdict

CLASSES = ("correct", "computational", "conceptual")


def accepted_items(items: Iterable[ReviewItem], decisions: Iterable[Decision],
                   min_verdicts: int = 1) -> list[tuple[Candidate, str]]:
    """(candidate as it enters the dataset, source) for every item the reviewers accepted."""
    by_item: dict[str, list[Decision]] = {}
    for decision in sorted(decisions, key=lambda d: d.decided_at):
        by_item.setdefault(decision.item_id, []).append(decision)
    accepted = []
    for item in items:
        votes = Counter(v for v in map(verdict, by_item.get(item.item_id, [])) if v is not None)
        if sum(votes.values()) < min_verdicts or votes["accept"] <= votes["reject"]:
            continue
        edits = [d for d in by_item[item.item_id] if d.kind == "edit" and d.edited_solution]
        if edits:
            accepted.append((item.candidate.model_copy(update={"flawed_solution": edits[0].edited_solution}),
                             "human-edited"))
        else:
            accepted.append((item.candidate, "human-reviewed"))
    return accepted


def _sample(rows: list[dict], size: int | None, seed: int) -> list[dict]:
    ordered = sorted(rows, key=lambda row: hashlib.sha256(f"{seed}:{row['id']}".encode()).digest())
    return ordered if size is None else ordered[:size]


def _correct_row(problem: GSM8KProblem, tier: str | None) -> dict:
    return {"id": f"correct-{problem.index}", "problem_index": problem.index, "tier": tier, "split": "",
            "question": problem.question, "correct_solution": problem.answer, "flawed_solution": None,
            "family": "correct", "error_type": None, "erroneous_line_number": None, "erroneous_line": None,
            "explanation": None, "source": "gsm8k"}


def build_final_dataset(*, conceptual: list[tuple[Candidate, str]], computational: Iterable[Candidate],
                        problems: Sequence[GSM8KProblem], sizes: Mapping[str, int | None],
                        test_fraction: float, seed: int) -> dict[str, list[dict]]:
    """{'train': rows, 'test': rows}: each class capped at its size (None keeps all), sampled by seed."""
    unknown = set(sizes) - set(CLASSES)
    if unknown:
        raise ExportError(f"unknown class(es) {', '.join(sorted(unknown))}; classes are {', '.join(CLASSES)}")
    computational = list(computational)
    for candidate, _ in conceptual:
        if candidate.family != "conceptual":
            raise ExportError(f"reviewed candidate {candidate.id} is {candidate.family}, not conceptual")
    for candidate in computational:
        if candidate.family != "computational":
            raise ExportError(f"candidate {candidate.id} is {candidate.family}, not computational")
    for candidate in [c for c, _ in conceptual] + computational:
        if not 0 <= candidate.problem_index < len(problems):
            raise ExportError(f"candidate {candidate.id} is for problem {candidate.problem_index}, "
                              f"which the GSM8K file (of {len(problems)} problems) does not have")

    def rows_of(candidates: list[tuple[Candidate, str]]) -> list[dict]:
        return [{**dataset_row(c, problems[c.problem_index], ""), "source": source} for c, source in candidates]

    by_class = {"conceptual": rows_of(conceptual), "computational": rows_of([(c, SOURCE) for c in computational])}
    tiers = {row["problem_index"]: row["tier"] for rows in by_class.values() for row in rows}
    by_class["correct"] = [_correct_row(problems[index], tiers[index]) for index in sorted(tiers)]
    chosen = [row for name in CLASSES for row in _sample(by_class[name], sizes.get(name), seed)]
    test = held_out_problems([row["problem_index"] for row in chosen], test_fraction, seed)
    splits: dict[str, list[dict]] = {"train": [], "test": []}
    for row in sorted(chosen, key=lambda r: (r["problem_index"], r["id"])):
        row["split"] = "test" if row["problem_index"] in test else "train"
        splits[row["split"]].append(row)
    return splits
