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
