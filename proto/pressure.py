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


# --- the study's results (experiment stage) -------------------------------------------------------

Condition = Literal["baseline", "negative"]
Outcome = Literal["failure", "success"]
ATTENTION_METRICS: tuple[str, ...] = ("iar", "nf", "tmf", "pi")


class Sample(Model):
    ids: list[int] = Field(description="The completion's token ids, the end of sequence excluded.")
    text: str


class AttentionSummary(Model):
    """One attention metric at the decision step (query T to the prompt's keys)."""

    mean: float = Field(description="Mean over layers and heads (the analyses' global value).")
    per_layer: list[float] = Field(description="Mean over heads, per layer.")


class Decomposition(Model):
    """p_first read from each decomposed block's input, after adding its attention output, and after adding its
    MLP output (the block's output), at the decision step."""

    blocks: list[int] = Field(description="Block indices 0..L-1, in order.")
    p_in: list[float]
    p_after_attn: list[float]
    p_after_mlp: list[float]


class ConditionResult(Model):
    """One prompt in one condition: its greedy completion, the trace's readings at the decision step and
    the behaviour of its samples."""

    greedy_ids: list[int]
    greedy_text: str
    greedy_violation: bool = Field(description="The greedy completion contains X (detector).")
    T: int = Field(ge=0, description="Decision step: index of X's first token in the greedy completion, 0 if "
                                     "absent.")
    lens: list[float] | None = Field(description="p_first through the final norm and unembedding at layers 0..L; "
                                                 "None where X has no single-token form.")
    decomposition: Decomposition | None = Field(description="None where X has no single-token form.")
    attention: dict[str, AttentionSummary] = Field(description="iar, nf, tmf and pi.")
    samples: list[Sample]
    violation_rate: float
    format_adherence: float = Field(description="Share of samples whose whole normalised completion is one word "
                                                "(the reference's rule).")
    format_adherence_first_line: float = Field(description="Share of samples whose first line is one word.")
    clean_success: float = Field(description="Share of samples adhering (reference rule) without X.")
    clean_success_first_line: float = Field(description="Share adhering by the first-line rule without X.")


class PromptResult(Model):
    prompt_id: str
    conditions: dict[Condition, ConditionResult]

    @property
    def outcome(self) -> Outcome:
        """Failure: the greedy negative completion contains X."""
        return "failure" if self.conditions["negative"].greedy_violation else "success"


class PatchEffect(Model):
    """One prompt, one patch kind: the effect of patching each block in turn (baseline into negative, at the
    negative prompt's last position)."""

    p_orig: float = Field(description="P of the unpatched negative prompt (sequence probability over S(X)).")
    p_first_orig: float | None = Field(description="p_first of the unpatched negative prompt; None where X has no "
                                                   "single-token form.")
    delta_p: list[float] = Field(description="Per block: P(patched) - P(unpatched).")
    delta_p_first: list[float] | None = Field(description="Per block: the same for p_first; None where X has no "
                                                          "single-token form.")
    flip: list[bool] = Field(description="Per block: the patched greedy continuation's violation differs from the "
                                         "unpatched one's. As the reference continues: residual and attention-output "
                                         "patches stay on, overwriting each new token's activation with the "
                                         "baseline's last one; the K/V kinds' entries stay in the cache.")


class PromptPatches(Model):
    prompt_id: str
    kinds: dict[str, PatchEffect] = Field(description="By patch kind (flawforge.inference.patching.PATCH_KINDS).")


class PatchSubset(Model):
    """Which prompts were patched and by what rule."""

    threshold: float = Field(description="P0 >= max(0.7, min(0.95, q75 of P0)).")
    fallback: str | None = Field(None, description="Set where no prompt reached the threshold and the gate was off.")
    prompts: list[str]
    successes: int
    failures: int
