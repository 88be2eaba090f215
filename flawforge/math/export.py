"""The error-detection dataset: one row per candidate, split train/test by GSM8K problem.

A problem's rows all land on the same side, so a model is never tested on a problem it
was trained on. The split depends only on the seed and the problem indices (sha256, not
a process-dependent hash or RNG), so it is reproducible and stable as candidates are added.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from pydantic import ValidationError

from flawforge.errors import FlawforgeError
from flawforge.math.gsm8k import GSM8KProblem, numbered_lines
from flawforge.math.selection import stable_hash
from flawforge.proto.math import Candidate

SOURCE = "programmatic"  # the original project's label for generated (not hand-written) errors


class ExportError(FlawforgeError):
    pass


def parse_candidates(text: str, source: str = "<candidates>") -> list[Candidate]:
    candidates = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            candidates.append(Candidate.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(map(str, first["loc"])) or "line"
            raise ExportError(f"{source}: line {line_number} is not a candidate ({where}: {first['msg']})") from None
    return candidates


def _same_answer(written: str, value: object) -> bool:
    try:
        expected = Fraction(written.replace(",", "").replace("$", "").strip())
        return abs(float(expected) - float(value)) <= 1e-6 * max(1.0, abs(float(expected)))  # type: ignore[arg-type]
    except (ValueError, TypeError, ZeroDivisionError):
        return False


def held_out_problems(indices: Sequence[int], test_fraction: float, seed: int) -> set[int]:
    """The problems on the test side: the round(n * fraction) first in seeded sha256 order."""
    if not 0.0 <= test_fraction <= 1.0:
        raise ExportError(f"test fraction must be between 0 and 1, got {test_fraction}")
    distinct = sorted(set(indices))
    ordered = sorted(distinct, key=lambda i: stable_hash(str(seed), str(i)))
    return set(ordered[:round(len(distinct) * test_fraction)])


def dataset_row(candidate: Candidate, problem: GSM8KProblem, split: str) -> dict:
    flawed_lines = numbered_lines(candidate.flawed_solution)
    return {
        "id": candidate.id,
        "problem_index": candidate.problem_index,
        "tier": candidate.tier,
        "split": split,
        "question": problem.question,
        "correct_solution": problem.answer,
        "flawed_solution": candidate.flawed_solution,
        "family": candidate.family,
        "error_type": candidate.error_type,
        "erroneous_line_number": candidate.erroneous_line_number,
        "erroneous_line": flawed_lines.get(candidate.erroneous_line_number, ""),
        "explanation": candidate.explanation,
        "source": SOURCE,
    }


def build_dataset(candidates: list[Candidate], problems: Sequence[GSM8KProblem], test_fraction: float,
                  seed: int) -> dict[str, list[dict]]:
    """{'train': rows, 'test': rows}, each sorted by problem and candidate id."""
    mismatched = []
    for candidate in candidates:
        if not 0 <= candidate.problem_index < len(problems):
            raise ExportError(f"candidate {candidate.id} is for problem {candidate.problem_index}, "
                              f"which the GSM8K file (of {len(problems)} problems) does not have")
        if not _same_answer(problems[candidate.problem_index].final_answer, candidate.correct_final_answer.to_python()):
            mismatched.append(candidate)
    if mismatched:
        first = mismatched[0]
        raise ExportError(f"the GSM8K file does not hold the candidates' problems: {len(mismatched)} of "
                          f"{len(candidates)} candidates have another correct answer than its row (problem "
                          f"{first.problem_index}: the file says {problems[first.problem_index].final_answer}, the "
                          f"candidate {first.correct_final_answer.to_python()}); is it the split they came from?")
    test = held_out_problems([c.problem_index for c in candidates], test_fraction, seed)
    splits: dict[str, list[dict]] = {"train": [], "test": []}
    for candidate in sorted(candidates, key=lambda c: (c.problem_index, c.id)):
        split = "test" if candidate.problem_index in test else "train"
        splits[split].append(dataset_row(candidate, problems[candidate.problem_index], split))
    return splits
