"""Where an error sits in a solution, and line diffs between solutions or code."""
from __future__ import annotations

import difflib
import re

from flawforge.math.gsm8k import FINAL_ANSWER_MARK
from flawforge.proto.review import LineChange, Position

_STEP_LABEL = re.compile(r"^L([1-9]\d*)$")
FINAL_ANSWER_LABEL = "FA"


def _step_line_indices(solution: str) -> tuple[list[int], int | None]:
    """Indices (into splitlines()) of the non-empty step lines, and of the final-answer line."""
    steps, final = [], None
    for index, line in enumerate(solution.splitlines()):
        stripped = line.strip()
        if stripped.startswith(FINAL_ANSWER_MARK):
            final = index
        elif stripped:
            steps.append(index)
    return steps, final


def line_index(solution: str, label: str) -> int | None:
    """The 0-based line of `solution` a label names: 'L<k>' is the k-th step, 'FA' the '####' line."""
    steps, final = _step_line_indices(solution)
    if label == FINAL_ANSWER_LABEL:
        return final
    match = _STEP_LABEL.match(label)
    if match is None:
        raise ValueError(f"erroneous line label {label!r} is neither 'L<k>' nor 'FA'")
    k = int(match.group(1))
    return steps[k - 1] if k <= len(steps) else None


def error_position(solution: str, label: str) -> Position:
    """Early, middle or late third of the solution's steps; the final answer counts as late."""
    if label == FINAL_ANSWER_LABEL:
        return "late"
    match = _STEP_LABEL.match(label)
    if match is None:
        raise ValueError(f"erroneous line label {label!r} is neither 'L<k>' nor 'FA'")
    steps = max(len(_step_line_indices(solution)[0]), 1)
    fraction = min(int(match.group(1)), steps) / steps
    return "early" if fraction <= 1 / 3 else "middle" if fraction <= 2 / 3 else "late"


def line_labels(solution: str, indices: set[int]) -> list[str]:
    """The labels ('L<k>', 'FA') of the given 0-based lines, in solution order."""
    steps, final = _step_line_indices(solution)
    labels = [f"L{k}" for k, index in enumerate(steps, start=1) if index in indices]
    return labels + ([FINAL_ANSWER_LABEL] if final is not None and final in indices else [])


def line_diff(generated: str, edited: str) -> list[LineChange]:
    """The changed hunks turning the generated text into the edited one."""
    old, new = generated.splitlines(), edited.splitlines()
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    return [LineChange(op=op, generated_start=i1, generated_end=i2, edited_start=j1, edited_end=j2,
                       generated_lines=old[i1:i2], edited_lines=new[j1:j2])
            for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal"]


def code_diff(original_code: str, mutated_code: str) -> str:
    """Unified diff of the template code against the mutated code; empty when either is unknown."""
    if not original_code or not mutated_code:
        return ""
    return "".join(difflib.unified_diff(original_code.splitlines(keepends=True),
                                        mutated_code.splitlines(keepends=True),
                                        fromfile="template.py", tofile="mutated.py"))
