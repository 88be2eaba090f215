"""Semantic-pressure pipeline (seed 001): the prompt record both stages share.

`prompts.jsonl` holds one `PromptRecord` a line: the dataset stage writes it, the experiment stage reads it.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from flawforge.proto.base import Model

Category = Literal["idioms", "facts", "common_sense", "creative", "ood"]
CATEGORIES: tuple[str, ...] = ("idioms", "facts", "common_sense", "creative", "ood")

# P0 bins [0,.2), [.2,.4), [.4,.6), [.6,.8), [.8,1]: the last bin is closed (P0 = 1 belongs to it).
BIN_EDGES: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
P0_BINS: tuple[str, ...] = ("0.0-0.2", "0.2-0.4", "0.4-0.6", "0.6-0.8", "0.8-1.0")
P0Bin = Literal["0.0-0.2", "0.2-0.4", "0.4-0.6", "0.6-0.8", "0.8-1.0"]


def p0_bin_of(p0: float) -> str:
    """The label of the pressure bin holding `p0` (in [0, 1])."""
    if not 0.0 <= p0 <= 1.0:
        raise ValueError(f"P0 must lie in [0, 1], got {p0}")
    for label, upper in zip(P0_BINS, BIN_EDGES[1:]):
        if p0 < upper:
            return label
    return P0_BINS[-1]


class PromptRecord(Model):
    """One validated prompt of the study: a question whose natural one-word answer is `target_word`."""

    prompt_id: str = Field(min_length=1, description="Unique within the file; names the run's per-prompt blobs.")
    category: Category
    question_text: str = Field(min_length=1, description="The question, inserted as {q} in both templates.")
    target_word: str = Field(min_length=1, description="X: the answer the negative prompt forbids; alphabetic.")
    validation: dict[str, Any] = Field(default_factory=dict,
                                       description="The validator's verdict as it answered (JSON object).")
    v_score: float = Field(ge=0, le=100, description="V: the validator rubric's score, 0 on any hard fail.")
    p0: float = Field(ge=0, le=1, description="P_sem of X under the baseline prompt.")
    p1: float = Field(ge=0, le=1, description="P_sem of X under the negative prompt.")
    p0_bin: P0Bin = Field(description="The pressure bin of p0.")
    s_score: float = Field(description="S = V + 100 * P0, the selection score.")

    @model_validator(mode="after")
    def _check(self):
        if not self.target_word.isalpha():
            raise ValueError(f"target_word must be alphabetic, got {self.target_word!r}")
        if self.p0_bin != p0_bin_of(self.p0):
            raise ValueError(f"p0_bin {self.p0_bin!r} does not hold p0={self.p0}")
        return self
