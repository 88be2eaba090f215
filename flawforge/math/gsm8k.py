"""GSM8K problems: reading the jsonl file (row N is problem N) and parsing its solutions."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from flawforge.errors import FlawforgeError
from flawforge.inputs import InputRefused, read_input

FINAL_ANSWER_MARK = "####"
# The original project dropped the last solution line only when it looked like this.
_FINAL_ANSWER_LINE = re.compile(r"^####\s*[\d.,]+$")


class GSM8KError(FlawforgeError):
    pass


@dataclass(frozen=True)
class GSM8KProblem:
    index: int
    question: str
    answer: str  # the full solution text, ending with '#### <final answer>'

    @property
    def final_answer(self) -> str:
        return final_answer_text(self.answer)


def final_answer_text(solution: str) -> str:
    """The final answer as written after the last '####', e.g. '1,200'."""
    if FINAL_ANSWER_MARK not in solution:
        raise GSM8KError(f"solution has no '{FINAL_ANSWER_MARK}' final answer: {solution[-80:]!r}")
    return solution.rsplit(FINAL_ANSWER_MARK, 1)[1].strip()


def final_answer_value(solution: str) -> float | None:
    """The final answer as a number (thousands separators removed), or None if it is not one."""
    try:
        return float(final_answer_text(solution).replace(",", ""))
    except (GSM8KError, ValueError):
        return None


def solution_lines(solution: str) -> dict[str, str]:
    """Non-empty solution lines keyed 'L1', 'L2', ..., without the final-answer line."""
    lines = [line.strip() for line in solution.splitlines() if line.strip()]
    if lines and _FINAL_ANSWER_LINE.match(lines[-1]):
        lines.pop()
    return {f"L{number}": line for number, line in enumerate(lines, start=1)}


def numbered_lines(solution: str) -> dict[str, str]:
    """Solution lines keyed 'L1', 'L2', ... and the final answer keyed 'FA' (the erroneous-line labels)."""
    lines = [line.strip() for line in solution.splitlines() if line.strip()]
    numbered = {}
    if lines and lines[-1].startswith(FINAL_ANSWER_MARK):
        numbered["FA"] = lines.pop()[len(FINAL_ANSWER_MARK):].strip()
    return {**{f"L{number}": line for number, line in enumerate(lines, start=1)}, **numbered}


def index_range(text: str) -> range:
    """Problems 'A-B' (inclusive) or 'A'; raises ValueError saying what is wrong."""
    first, dash, last = text.strip().partition("-")
    if not (first.isdigit() and (not dash or last.isdigit())):
        raise ValueError(f"must look like A-B (e.g. 0-99), got {text!r}")
    if len(first) > 7 or len(last) > 7:
        raise ValueError(f"{text[:40]!r}: an index has at most 7 digits")
    start, stop = int(first), int(last) if dash else int(first)
    if start > stop:
        raise ValueError(f"{text!r}: the first index is above the last")
    return range(start, stop + 1)


def parse_gsm8k(text: str, source: str = "<gsm8k>") -> list[GSM8KProblem]:
    """Parses GSM8K jsonl text; every non-empty line must be {"question": str, "answer": str}."""
    problems = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GSM8KError(f"{source}: line {line_number} is not JSON: {exc.msg}") from None
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("question", "answer")):
            raise GSM8KError(f"{source}: line {line_number} needs string fields 'question' and 'answer'")
        problems.append(GSM8KProblem(index=len(problems), question=row["question"], answer=row["answer"]))
    if not problems:
        raise GSM8KError(f"{source}: no problems in the file")
    return problems


def read_gsm8k(path: str | Path) -> list[GSM8KProblem]:
    path = Path(path)
    try:
        text = read_input(path).decode("utf-8")  # a regular file, bounded in size, opened without blocking
    except FileNotFoundError:
        raise GSM8KError(f"GSM8K file not found: {path}") from None
    except (InputRefused, UnicodeDecodeError) as exc:
        raise GSM8KError(f"cannot read GSM8K file {path}: {exc}") from None
    return parse_gsm8k(text, str(path))
