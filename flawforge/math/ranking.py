"""How plausible a flawed solution looks to a reviewer: a score per candidate, learned from the human decisions.

The score is a logistic model over a few features every mutant has before its text is written
(so the caps can rank mutants, not only finished candidates): the error type, how far the flawed
answer is from the correct one, whether it is whole, its magnitude, where in the solution the error
sits, how much the erroneous step's own value moved, whether a substitution makes the step read the
same quantity twice (`50 x 50`), and whether the erroneous step involves a world-knowledge constant
(a unit conversion such as minutes per hour). Its weights are data
(`ranking_weights.json`), fitted by `python -m flawforge.math.ranking_fit` from the human review
of problems < 2500; the same fit, run per fold with the folds grouped by problem, gives the
cross-validated ROC AUC that `flawforge recall` reports. Everything here is pure and deterministic.
"""
from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from flawforge.math import PROBLEM_CACHE_SIZE
from flawforge.math.arithmetic import is_int_like, is_number
from flawforge.math.program import FINAL_ANSWER_STEP, Assignment, Program, TemplateError, expression_nodes
from flawforge.proto.math import CONCEPTUAL_TYPES, Candidate

WEIGHTS_FILE = Path(__file__).with_name("ranking_weights.json")
_CAP = 6.0  # orders of magnitude: a larger change reads the same
_WORLD_KNOWLEDGE = re.compile(r"^\s*(\w+)\s*=[^#\n]*#\s*WK\b", re.MULTILINE)
_SUBSTITUTIONS = ("incorrect_operand", "input_misrepresentation")
L2 = 10.0  # the strongest shrinkage of 0.1, 1 and 10, and the best cross-validated AUC on the shared decisions


def _log_ratio(new: Any, old: Any) -> float:
    """|log10(new / old)|, capped: 0 for no change, 1 for a factor of ten."""
    if not (is_number(new) and is_number(old)) or new == 0 or old == 0:
        return _CAP
    return min(_CAP, abs(math.log10(abs(float(new)) / abs(float(old)))))


def world_knowledge_names(source: str) -> frozenset[str]:
    """The variables a template marks as world knowledge (`minutes_per_hour = 60  # WK`)."""
    return frozenset(_WORLD_KNOWLEDGE.findall(source))


def names_read(expression: ast.expr | None, renamed: Mapping[str, str] | None = None) -> Counter:
    """How many times the expression reads each name; with `renamed`, as if each name in it were renamed (what
    the renamed copy of the expression reads, without building it)."""
    if expression is None:
        return Counter()
    if not renamed:
        return Counter(_loads(expression))
    return Counter(renamed.get(name, name) for name in _loads(expression))


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)  # by identity: one site's expression, read for each of its substitutions
def _loads(expression: ast.expr) -> tuple[str, ...]:
    return tuple(node.id for node in expression_nodes(expression)
                 if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load))


def features(*, error_type: str, correct_answer: Any, flawed_answer: Any, correct_value: Any, flawed_value: Any,
             position: float, params: Mapping[str, Any], reads: Mapping[str, int],
             world_knowledge: Collection[str]) -> dict[str, float]:
    """The features of one mutant; `position` is the erroneous step's place in the solution, 0 to 1 (for a
    reported intermediate: the place of the step it stops at); `params` the mutation's parameters; `reads` how
    many times the flawed expression of the erroneous step reads each name (`names_read`); `world_knowledge`
    the template's world-knowledge variables (`world_knowledge_names`)."""
    row = {f"type={t}": float(error_type == t) for t in CONCEPTUAL_TYPES}
    answer = float(flawed_answer) if is_number(flawed_answer) else 0.0
    involved = set(reads) | {params[k] for k in ("operand", "replacement", "term", "selected")
                             if isinstance(params.get(k), str)}
    row.update({
        "answer_change": _log_ratio(flawed_answer, correct_answer),
        "answer_smaller": float(is_number(flawed_answer) and is_number(correct_answer)
                                and flawed_answer < correct_answer),
        "answer_whole": float(is_number(flawed_answer) and is_int_like(flawed_answer)),
        "answer_magnitude": math.log10(1 + abs(answer)) if math.isfinite(answer) else _CAP,
        "position": position,
        "step_change": _log_ratio(flawed_value, correct_value),
        # a substitution that makes the step read one quantity twice: "30 kids each make 30 cards"
        "repeats_operand": float(error_type in _SUBSTITUTIONS and reads.get(params.get("replacement"), 0) >= 2),
        # the erroneous step reads (or a substitution moves or a dropped term is) a world-knowledge constant
        "world_knowledge": float(bool(involved & set(world_knowledge))),
    })
    return row


def erroneous_assignment(candidate: Candidate) -> Assignment | None:
    """The assignment the candidate's mutation changed, read back from its mutated code (its right-hand side is
    the flawed one; its position is the site's)."""
    try:
        program = Program.parse(candidate.mutated_code, [])
    except TemplateError:
        return None
    line = candidate.erroneous_line_number
    assignments = [a for a in program.assignments if a.target == candidate.target_variable]
    in_step = [a for a in assignments if a.step == line or (line == FINAL_ANSWER_STEP and a is program.answer)]
    chosen = (in_step or assignments)[-1:]
    return chosen[0] if chosen else None


def candidate_features(candidate: Candidate) -> dict[str, float]:
    original = [line for line in candidate.original_solution.splitlines() if line.strip()][:-1]
    flawed = [line for line in candidate.flawed_solution.splitlines() if line.strip()][:-1]
    steps = max(1, len(original))
    if candidate.erroneous_line_number.startswith("L") and candidate.erroneous_line_number[1:].isdigit():
        position = int(candidate.erroneous_line_number[1:]) / steps
    else:  # the solution stops at the reported step
        position = len(flawed) / steps
    params = {k: v for k, v in candidate.mutation.items() if k != "name"}
    assignment = erroneous_assignment(candidate)
    return features(error_type=candidate.error_type, correct_answer=candidate.correct_final_answer.to_python(),
                    flawed_answer=candidate.flawed_final_answer.to_python(),
                    correct_value=candidate.correct_value.to_python(), flawed_value=candidate.flawed_value.to_python(),
                    position=min(1.0, position), params=params,
                    reads=names_read(assignment.value if assignment is not None else None),
                    world_knowledge=world_knowledge_names(candidate.mutated_code))


@dataclass(frozen=True)
class Ranker:
    weights: Mapping[str, float]  # per feature, and "bias"

    def score(self, row: Mapping[str, float]) -> float:
        return self.weights.get("bias", 0.0) + sum(self.weights.get(name, 0.0) * value for name, value in row.items())

    def to_json(self) -> str:
        return json.dumps({"weights": dict(sorted(self.weights.items()))}, indent=1) + "\n"


@lru_cache(maxsize=1)
def shipped_ranker() -> Ranker:
    return Ranker(weights=json.loads(WEIGHTS_FILE.read_text(encoding="utf-8"))["weights"])


# --- fitting ------------------------------------------------------------------------------------
def fit(rows: Sequence[Mapping[str, float]], labels: Sequence[int], l2: float = 1.0, iterations: int = 25) -> dict:
    """Weights of an L2-regularised logistic regression (Newton's method on standardised features; the weights
    returned apply to the raw features). Deterministic: no random start, a fixed number of steps."""
    names = sorted({name for row in rows for name in row})
    n = len(rows)
    means = {k: sum(r.get(k, 0.0) for r in rows) / n for k in names}
    scales = {k: math.sqrt(sum((r.get(k, 0.0) - means[k]) ** 2 for r in rows) / n) or 1.0 for k in names}
    matrix = [[1.0] + [(r.get(k, 0.0) - means[k]) / scales[k] for k in names] for r in rows]
    size = len(names) + 1
    beta = [0.0] * size
    for _ in range(iterations):
        gradient = [0.0] * size
        hessian = [[0.0] * size for _ in range(size)]
        for x, y in zip(matrix, labels):
            p = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, sum(b * v for b, v in zip(beta, x))))))
            weight = p * (1 - p)
            for i in range(size):
                gradient[i] += (y - p) * x[i]
                for j in range(i, size):
                    hessian[i][j] += weight * x[i] * x[j]
        for i in range(size):
            for j in range(i):
                hessian[i][j] = hessian[j][i]
            if i:  # the intercept is not shrunk
                gradient[i] -= l2 * beta[i]
                hessian[i][i] += l2
        beta = [b + s for b, s in zip(beta, _solve(hessian, gradient))]
    weights = {k: beta[i + 1] / scales[k] for i, k in enumerate(names)}
    weights["bias"] = beta[0] - sum(beta[i + 1] * means[k] / scales[k] for i, k in enumerate(names))
    return weights


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the systems here are a dozen unknowns)."""
    size = len(vector)
    a = [row[:] + [v] for row, v in zip(matrix, vector)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        if abs(a[col][col]) < 1e-12:
            continue
        for r in range(size):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col])]
    return [a[i][size] / a[i][i] if abs(a[i][i]) >= 1e-12 else 0.0 for i in range(size)]


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """The probability that a positive scores above a negative (ties count half)."""
    positives = [s for s, y in zip(scores, labels) if y]
    negatives = [s for s, y in zip(scores, labels) if not y]
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > q) + 0.5 * (p == q) for p in positives for q in negatives)
    return wins / (len(positives) * len(negatives))


def grouped_folds(groups: Sequence[Any], folds: int) -> list[int]:
    """The fold of each row: every row of a group in the same fold, groups dealt round-robin in sorted order."""
    order = {group: position % folds for position, group in enumerate(sorted(set(groups), key=str))}
    return [order[group] for group in groups]


def cross_validated_auc(rows: Sequence[Mapping[str, float]], labels: Sequence[int], groups: Sequence[Any],
                        folds: int = 5, l2: float = 1.0) -> float:
    """ROC AUC of out-of-fold scores, each fold scored by a model fitted on the other folds."""
    fold_of = grouped_folds(groups, folds)
    scores = [0.0] * len(rows)
    for fold in range(folds):
        train = [i for i, f in enumerate(fold_of) if f != fold]
        test = [i for i, f in enumerate(fold_of) if f == fold]
        if not test or len({labels[i] for i in train}) < 2:
            continue
        model = Ranker(weights=fit([rows[i] for i in train], [labels[i] for i in train], l2))
        for i in test:
            scores[i] = model.score(rows[i])
    return roc_auc(scores, labels)
