"""How many of the human reviewers' decisions the generator reproduces.

The human review of the original conceptual-error candidates (`decisions.csv` and the
accepted, edited solutions in `accepted/<tier>/<index>/<model>_<type>_....json`) says which
errors people found realistic. An accepted error counts as produced when a candidate has the
same problem, template model, error type, erroneous line and flawed final answer; a rejected
one when a candidate has the same problem, template model, error type, target variable and
flawed value of that variable (a rejected decision records no line or final answer).
"""
from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterable

from flawforge.errors import FlawforgeError
from flawforge.math.ranking import L2, Ranker, candidate_features, erroneous_assignment, fit, grouped_folds, roc_auc
from flawforge.math.selection import Choice, choice_key, select
from flawforge.math.type_mix import TypeMix
from flawforge.proto.math import CONCEPTUAL_TYPES, Caps, Candidate
from flawforge.proto.values import TypedValue

_FINAL_ANSWER = re.compile(r"^####\s*(.+?)\s*$", re.MULTILINE)
_ACCEPTED_NAME = re.compile(rf"^(?P<model>.+?)_(?P<type>{'|'.join(CONCEPTUAL_TYPES)})_")


class HumanReviewError(FlawforgeError):
    pass


@dataclass(frozen=True)
class HumanDecision:
    problem_index: int
    tier: str
    template_model: str
    error_type: str
    status: str                      # 'accepted' or 'rejected'
    erroneous_line_number: str = ""  # accepted only
    flawed_final_answer: str = ""    # accepted only, as written after '####'
    target_variable: str = ""        # rejected only
    flawed_value: str = ""           # rejected only


def parse_accepted(name: str, tier: str, problem_index: int, text: str) -> HumanDecision:
    """One accepted solution file; `name` is its file name."""
    match = _ACCEPTED_NAME.match(name)
    if not match:
        raise HumanReviewError(f"{tier}/{problem_index}/{name}: name is not <model>_<error type>_...")
    try:
        document = json.loads(text)
        details = document["error_details"]
        solution = document["context"]["flawed_solution"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise HumanReviewError(f"{tier}/{problem_index}/{name}: not an accepted-solution file ({exc})") from None
    answer = _FINAL_ANSWER.search(solution)
    if not answer:
        raise HumanReviewError(f"{tier}/{problem_index}/{name}: the solution has no '####' line")
    return HumanDecision(problem_index=problem_index, tier=tier, template_model=match.group("model"),
                         error_type=details.get("error_type", match.group("type")), status="accepted",
                         erroneous_line_number=details.get("erroneous_line_number", ""),
                         flawed_final_answer=answer.group(1))


def parse_rejected(decisions_csv: str) -> list[HumanDecision]:
    """The rejected rows of decisions.csv."""
    rows = csv.DictReader(io.StringIO(decisions_csv))
    needed = {"index", "tier", "model", "mutation_type", "target_variable", "flawed_value", "status"}
    if not needed <= set(rows.fieldnames or ()):
        raise HumanReviewError(f"decisions.csv lacks columns {sorted(needed - set(rows.fieldnames or ()))}")
    return [HumanDecision(problem_index=int(row["index"]), tier=row["tier"], template_model=row["model"],
                          error_type=row["mutation_type"], status="rejected", target_variable=row["target_variable"],
                          flawed_value=row["flawed_value"])
            for row in rows if row["status"] == "rejected"]


def read_human_review(folder: str | Path) -> list[HumanDecision]:
    folder = Path(folder)
    try:
        decisions = parse_rejected((folder / "decisions.csv").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HumanReviewError(f"no decisions.csv in {folder}") from None
    for path in sorted((folder / "accepted").glob("*/*/*.json")):
        decisions.append(parse_accepted(path.name, path.parent.parent.name, int(path.parent.name),
                                        path.read_text(encoding="utf-8")))
    return decisions


def _number(text: str) -> Fraction | None:
    try:
        return Fraction(text.replace(",", "").replace("$", "").strip())
    except (ValueError, ZeroDivisionError):
        return None


def _same_number(written: str, value: TypedValue) -> bool:
    expected = _number(written)
    produced = value.to_python()
    if expected is None or isinstance(produced, (bool, str)) or produced is None:
        return False
    try:
        return abs(Fraction(produced) - expected) <= Fraction(1, 10**6) * max(1, abs(expected))
    except (TypeError, ValueError):
        return False


def reproduces(candidate: Candidate, decision: HumanDecision) -> bool:
    if (candidate.problem_index, candidate.template_model, candidate.error_type) != (
            decision.problem_index, decision.template_model, decision.error_type):
        return False
    if decision.status == "accepted":
        return (candidate.erroneous_line_number == decision.erroneous_line_number
                and _same_number(decision.flawed_final_answer, candidate.flawed_final_answer))
    return candidate.target_variable == decision.target_variable and _same_number(decision.flawed_value,
                                                                                   candidate.flawed_value)


@dataclass
class RecallReport:
    accepted: int = 0
    accepted_produced: int = 0
    rejected: int = 0
    rejected_produced: int = 0
    accepted_by_type: Counter = field(default_factory=Counter)
    produced_by_type: Counter = field(default_factory=Counter)
    missed: list[HumanDecision] = field(default_factory=list)

    @property
    def accepted_recall(self) -> float:
        return self.accepted_produced / self.accepted if self.accepted else 0.0

    @property
    def rejected_recall(self) -> float:
        return self.rejected_produced / self.rejected if self.rejected else 0.0

    def summary(self) -> str:
        per_type = ", ".join(f"{t} {self.produced_by_type[t]}/{n}" for t, n in sorted(self.accepted_by_type.items()))
        return (f"accepted reproduced: {self.accepted_produced}/{self.accepted} ({self.accepted_recall:.1%}); "
                f"rejected reproduced: {self.rejected_produced}/{self.rejected} ({self.rejected_recall:.1%}); "
                f"by type: {per_type}")


def recall(decisions: Iterable[HumanDecision], candidates: Iterable[Candidate]) -> RecallReport:
    by_problem: dict[tuple[int, str], list[Candidate]] = {}
    for candidate in candidates:
        by_problem.setdefault((candidate.problem_index, candidate.template_model), []).append(candidate)
    report = RecallReport()
    for decision in decisions:
        produced = any(reproduces(c, decision) for c in by_problem.get((decision.problem_index,
                                                                           decision.template_model), ()))
        if decision.status == "accepted":
            report.accepted += 1
            report.accepted_by_type[decision.error_type] += 1
            report.accepted_produced += produced
            report.produced_by_type[decision.error_type] += produced
            if not produced:
                report.missed.append(decision)
        else:
            report.rejected += 1
            report.rejected_produced += produced
    return report


def labelled(decisions: Iterable[HumanDecision], candidates: Iterable[Candidate]) -> list[tuple[HumanDecision, Candidate]]:
    """Each decision with the first candidate that reproduces it (decisions no candidate reproduces are left
    out): the examples the plausibility ranker learns from and is measured on."""
    by_problem: dict[tuple[int, str], list[Candidate]] = {}
    for candidate in candidates:
        by_problem.setdefault((candidate.problem_index, candidate.template_model), []).append(candidate)
    pairs = []
    for decision in decisions:
        match = next((c for c in by_problem.get((decision.problem_index, decision.template_model), ())
                      if reproduces(c, decision)), None)
        if match is not None:
            pairs.append((decision, match))
    return pairs


def examples(pairs: list[tuple[HumanDecision, Candidate]]) -> tuple[list[dict], list[int], list[int]]:
    """The ranker's examples from labelled pairs: each candidate's features, 1 for accepted, and its problem."""
    rows = [candidate_features(candidate) for _, candidate in pairs]
    labels = [int(decision.status == "accepted") for decision, _ in pairs]
    groups = [decision.problem_index for decision, _ in pairs]
    return rows, labels, groups


def kept_at(candidates: Iterable[Candidate], caps: Caps, ranker: Ranker, mix: TypeMix) -> list[Candidate]:
    """The conceptual candidates of an uncapped run that generation under `caps` keeps with `ranker` and `mix`:
    each problem's selection replayed with its seed (the quotas it draws, the ties it breaks) and each
    candidate's key and score, as generation computes them."""
    by_problem: dict[tuple[int, str], list[Candidate]] = {}
    for candidate in candidates:
        if candidate.family == "conceptual":
            by_problem.setdefault((candidate.problem_index, candidate.template_model), []).append(candidate)
    kept = []
    for group in by_problem.values():
        seed = group[0].seed
        choices = []
        for candidate in group:
            assignment = erroneous_assignment(candidate)
            params = {k: v for k, v in candidate.mutation.items() if k != "name"}
            choices.append(Choice(family=candidate.family, error_type=candidate.error_type,
                                  line=candidate.erroneous_line_number, prior=1.0,
                                  key=choice_key(assignment.position if assignment else -1, candidate.error_type,
                                                 params),
                                  item=candidate, score=ranker.score(candidate_features(candidate))))
        kept += select(choices, caps, seed, quotas=mix.draw(seed, caps))
    return kept


@dataclass
class CrossValidated:
    report: RecallReport  # the decisions the replayed selection reproduces
    auc: float            # the out-of-fold scores' ROC AUC between reproduced accepted and rejected decisions
    kept: int             # conceptual candidates the replayed selection keeps


def cross_validated_recall(decisions: list[HumanDecision], pool: list[Candidate], caps: Caps, mix: TypeMix,
                           folds: int = 5) -> CrossValidated:
    """Recall of the selection under `caps`, measured on problems whose decisions the ranker never saw: the
    decisions' problems are split into folds; each fold's candidates are selected (`kept_at`) with a ranker
    fitted on the other folds' decisions. `pool` is an uncapped run's candidates."""
    pairs = labelled(decisions, pool)
    rows, labels, groups = examples(pairs)
    fold_of = dict(zip(groups, grouped_folds(groups, folds)))
    scores = [0.0] * len(rows)
    kept: list[Candidate] = []
    for fold in range(folds):
        train = [i for i, group in enumerate(groups) if fold_of[group] != fold]
        if len({labels[i] for i in train}) < 2:
            continue
        ranker = Ranker(weights=fit([rows[i] for i in train], [labels[i] for i in train], L2))
        for i, group in enumerate(groups):
            if fold_of[group] == fold:
                scores[i] = ranker.score(rows[i])
        kept += kept_at([c for c in pool if fold_of.get(c.problem_index) == fold], caps, ranker, mix)
    return CrossValidated(report=recall(decisions, kept), auc=roc_auc(scores, labels), kept=len(kept))
