"""The original project's human review: its accepted flawed solutions and its decision log.

`accepted/tierN/<index>/<file>.json` hold accepted flawed solutions (after the reviewers' edits,
with the final-answer line first); `decisions.csv` has one row per decision, naming the
reviewer ('validator') and the candidate file. A candidate is identified by its problem, tier,
file name and flawed value: the original project reused file names for different flawed values.
"""
from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from pathlib import Path, PurePosixPath

from flawforge.errors import FlawforgeError
from flawforge.math.gsm8k import FINAL_ANSWER_MARK, GSM8KProblem, final_answer_text
from flawforge.proto.math import Candidate
from flawforge.proto.review import Decision
from flawforge.proto.values import TypedValue

DECISION_COLUMNS = ("index", "tier", "model", "mutation_type", "target_variable", "correct_value", "flawed_value",
                    "status", "manual_edits", "validator", "filepath")
_KIND_OF_STATUS = {"accepted": "accept", "rejected": "reject", "skipped": "skip"}


class LegacyDataError(FlawforgeError):
    pass


def parse_number(text: str) -> int | float | Fraction | str:
    text = text.strip()
    for parse in (int, float, Fraction):
        try:
            return parse(text)
        except (ValueError, ZeroDivisionError):
            continue
    return text


def _canonical(value: str) -> str:
    number = parse_number(value.replace(",", ""))
    return str(Fraction(number)) if isinstance(number, (int, float, Fraction)) else number


def legacy_item_id(tier: str, problem_index: int, file_name: str, flawed_value: str) -> str:
    digest = hashlib.sha256(f"{tier}/{problem_index}/{file_name}/{_canonical(flawed_value)}".encode()).hexdigest()
    return f"legacy-{digest[:20]}"


@dataclass(frozen=True)
class DecisionRow:
    line: int
    fields: dict[str, str]

    @property
    def file_name(self) -> str:
        return PurePosixPath(self.fields["filepath"].replace("\\", "/")).name

    @property
    def problem_index(self) -> int:
        return int(self.fields["index"])

    @property
    def item_id(self) -> str:
        return legacy_item_id(self.fields["tier"], self.problem_index, self.file_name, self.fields["flawed_value"])


def read_decision_rows(path: str | Path) -> list[DecisionRow]:
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in DECISION_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise LegacyDataError(f"{path}: missing column(s) {', '.join(missing)}")
            rows = [DecisionRow(line=n, fields=row) for n, row in enumerate(reader, start=2)]
    except FileNotFoundError:
        raise LegacyDataError(f"decisions file not found: {path}") from None
    for row in rows:
        if row.fields["status"] not in _KIND_OF_STATUS:
            raise LegacyDataError(f"{path}:{row.line}: status {row.fields['status']!r} is not one of "
                                  f"{', '.join(_KIND_OF_STATUS)}")
        if not row.fields["index"].isdigit():
            raise LegacyDataError(f"{path}:{row.line}: index {row.fields['index']!r} is not a problem number")
    return rows


def legacy_decisions(rows: list[DecisionRow], decided_at: datetime) -> list[Decision]:
    """One decision per row; the log has no times, so every decision gets `decided_at`."""
    decisions = []
    for row in rows:
        edits = [label.strip() for label in row.fields["manual_edits"].split(",") if label.strip()]
        kind = _KIND_OF_STATUS[row.fields["status"]]
        decisions.append(Decision(
            round="", item_id=row.item_id, candidate_id=row.item_id, reviewer=row.fields["validator"],
            kind="edit" if kind == "accept" and edits else kind, decided_at=decided_at,
            error_type=row.fields["mutation_type"], tier=row.fields["tier"], problem_index=row.problem_index,
            slot=0, generation=0, edited_lines=edits))
    return decisions


def _gsm8k_order(solution: str) -> str:
    """Moves the final-answer line to the end, where GSM8K writes it."""
    lines = [line for line in solution.splitlines() if line.strip()]
    final = [line for line in lines if line.strip().startswith(FINAL_ANSWER_MARK)]
    return "\n".join([line for line in lines if line not in final] + final[-1:])


def _matching_row(rows: list[DecisionRow], final_answer: str) -> DecisionRow:
    if len(rows) == 1:
        return rows[0]
    # File names were reused for different flawed final answers; the file shows which one it holds.
    target = _canonical(final_answer)
    matching = [row for row in rows if _canonical(row.fields["flawed_value"]) == target]
    return (matching or rows)[-1]


def legacy_candidates(accepted_dir: str | Path, rows: list[DecisionRow],
                      problems: list[GSM8KProblem]) -> list[Candidate]:
    """Candidates rebuilt from the accepted files, joined with their decision rows and GSM8K.

    The original project kept no mutated code or traces, so those stay empty.
    """
    accepted_dir = Path(accepted_dir)
    by_file: dict[tuple[str, int, str], list[DecisionRow]] = {}
    for row in rows:
        by_file.setdefault((row.fields["tier"], row.problem_index, row.file_name), []).append(row)
    candidates: dict[str, Candidate] = {}
    for path in sorted(accepted_dir.glob("tier*/*/*.json")):
        tier, index = path.parts[-3], int(path.parts[-2])
        matches = by_file.get((tier, index, path.name))
        if not matches:
            continue  # no decision names this file, so nothing is known of its values
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            details, flawed = data["error_details"], _gsm8k_order(data["context"]["flawed_solution"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise LegacyDataError(f"{path}: not an accepted-solution file ({exc})") from None
        flawed_answer = final_answer_text(flawed)
        row = _matching_row([r for r in matches if r.fields["status"] == "accepted"] or matches, flawed_answer)
        problem = problems[index]
        candidate = Candidate(
            id=row.item_id, problem_index=index, tier=tier, template_model=row.fields["model"], family="conceptual",
            error_type=details["error_type"], target_variable=row.fields["target_variable"],
            erroneous_line_number=details["erroneous_line_number"],
            correct_value=TypedValue.of(parse_number(row.fields["correct_value"])),
            flawed_value=TypedValue.of(parse_number(row.fields["flawed_value"])),
            correct_final_answer=TypedValue.of(parse_number(problem.final_answer.replace(",", ""))),
            flawed_final_answer=TypedValue.of(parse_number(flawed_answer.replace(",", ""))),
            mutated_code="", correct_trace=[], flawed_trace=[], original_solution=problem.answer,
            flawed_solution=flawed, explanation=details["explanation"],
            mutation={"legacy_file": path.relative_to(accepted_dir).as_posix()}, seed=0)
        candidates[candidate.id] = candidate
    return list(candidates.values())
