"""The study's two prompt conditions, as raw text (no chat template), whitespace exact.

baseline:  Answer with exactly one English word.\\nQuestion: {q}\\nAnswer:
negative:  the same with `Do not use the word "{X}" anywhere in your answer.\\n` after the first line.
"""
from __future__ import annotations

from typing import Literal

Condition = Literal["baseline", "negative"]
CONDITIONS: tuple[str, ...] = ("baseline", "negative")

INSTRUCTION_LINE = "Answer with exactly one English word.\n"
PROHIBITION_LINE = 'Do not use the word "{target}" anywhere in your answer.\n'
QUESTION_LINE = "Question: {question}\n"
ANSWER_CUE = "Answer:"

BASELINE_TEMPLATE = INSTRUCTION_LINE + QUESTION_LINE + ANSWER_CUE
NEGATIVE_TEMPLATE = INSTRUCTION_LINE + PROHIBITION_LINE + QUESTION_LINE + ANSWER_CUE


def baseline_prompt(question: str) -> str:
    """The prompt without the prohibition."""
    return BASELINE_TEMPLATE.format(question=question)


def negative_prompt(question: str, target: str) -> str:
    """The prompt that forbids `target`."""
    return NEGATIVE_TEMPLATE.format(question=question, target=target)


def build_prompt(condition: Condition, question: str, target: str) -> str:
    """The prompt of `condition` for one question and its target word."""
    if condition == "baseline":
        return baseline_prompt(question)
    if condition == "negative":
        return negative_prompt(question, target)
    raise ValueError(f"unknown condition {condition!r}: expected one of {', '.join(CONDITIONS)}")


def spans(condition: Condition, question: str, target: str) -> dict[str, tuple[int, int]]:
    """Character ranges [start, end) of the attention spans in the prompt of `condition`: instr (the
    prohibition line, in the baseline the first line; without its newline), neg ("Do not use"), tgt (X
    inside its quotes) and q (the question text). The baseline has no neg or tgt."""
    prompt = build_prompt(condition, question, target)
    question_start = prompt.index("\nQuestion: ") + len("\nQuestion: ")
    found = {"q": (question_start, question_start + len(question))}
    if condition == "baseline":
        found["instr"] = (0, len(INSTRUCTION_LINE) - 1)
        return found
    line_start = len(INSTRUCTION_LINE)
    target_start = line_start + PROHIBITION_LINE.index("{target}")
    found["instr"] = (line_start, line_start + len(PROHIBITION_LINE.format(target=target)) - 1)
    found["neg"] = (line_start, line_start + len("Do not use"))
    found["tgt"] = (target_start, target_start + len(target))
    return found
