"""Human review of candidates: shortlist items, claims, decisions, agreement reports."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from flawforge.proto.base import Model
from flawforge.proto.math import Candidate

Position = Literal["early", "middle", "late"]
DecisionKind = Literal["accept", "reject", "skip", "edit"]
# A reviewer name doubles as a blob-key segment, so it is restricted to safe characters.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class Stratum(Model):
    """The cell of the shortlist's stratification an item was drawn from."""

    error_type: str
    tier: str
    position: Position = Field(description="Where the erroneous line sits in the solution.")


class ReviewItem(Model):
    """One shortlist entry: a frozen copy of exactly one candidate, with what the page shows."""

    item_id: str = Field(description="Equal to the candidate id: one item points at one candidate.")
    order: int = Field(description="Rank in the shortlist; earlier items are served first among equals.")
    stratum: Stratum
    question: str
    candidate: Candidate
    candidate_sha256: str = Field(description="Checksum of the candidate as shortlisted.")
    flawed_line_index: int | None = Field(
        None, description="0-based line of flawed_solution holding the error; None if it cannot be located.")
    original_line_index: int | None = Field(None, description="The same step in original_solution.")
    code_diff: str = Field("", description="Unified diff from the template code to the mutated code; "
                                           "empty when either is unknown.")


class RoundManifest(Model):
    """A review round: its shortlist and rules. Written once; the round exists once this is stored."""

    round: str = Field(pattern=NAME_PATTERN)
    created_at: datetime
    seed: int
    size_per_error_type: int
    family: str
    reviewers_per_item: int = Field(ge=1)
    source: str = Field(description="Where the candidates came from.")
    item_ids: list[str]


class LineChange(Model):
    """One changed hunk between the generated and the edited flawed solution (0-based, end exclusive)."""

    op: Literal["replace", "insert", "delete"]
    generated_start: int
    generated_end: int
    edited_start: int
    edited_end: int
    generated_lines: list[str]
    edited_lines: list[str]


class Claim(Model):
    """A reviewer holds one review slot of an item until they decide, skip, or the claim expires."""

    round: str
    item_id: str
    reviewer: str
    slot: int
    generation: int
    claimed_at: datetime
    reopens: int | None = Field(None, description="The generation of the same slot whose decision this reviewer "
                                                  "undid: that decision is withdrawn, and this claim is theirs to "
                                                  "decide again.")


class Decision(Model):
    """One reviewer's verdict on one item. Stored once, never overwritten."""

    round: str
    item_id: str
    candidate_id: str
    reviewer: str
    kind: DecisionKind
    decided_at: datetime
    error_type: str
    tier: str
    problem_index: int
    slot: int
    generation: int
    edited_solution: str | None = Field(None, description="The reviewer's text (kind 'edit').")
    line_diff: list[LineChange] = Field(default_factory=list, description="Generated -> edited lines.")
    edited_lines: list[str] = Field(default_factory=list, description="Solution line labels ('L2', 'FA') edited.")
    comment: str = ""
    source: str = Field("api", description="'api', or where an imported decision came from.")


class SlotRelease(Model):
    """Ends a claim without a verdict: it expired and another reviewer took over, or was a duplicate."""

    reason: Literal["expired", "duplicate"]
    by: str
    at: datetime


class SlotOutcome(Model):
    """What closed a claim: exactly one of a decision or a release."""

    decision: Decision | None = None
    release: SlotRelease | None = None


class DecisionRequest(Model):
    """Body of a decision. The reviewer is the bearer token's owner, never a field."""

    candidate_id: str = Field(description="The candidate the reviewer was shown; must be the item's.")
    kind: DecisionKind
    edited_solution: str | None = Field(None, description="Required for kind 'edit'; forbidden otherwise.")
    comment: str = Field("", max_length=2000)


class RoundProgress(Model):
    round: str
    items: int
    reviewers_per_item: int
    reviews_needed: int = Field(description="items x reviewers_per_item")
    reviews_done: int = Field(description="Accept, reject and edit decisions counted toward the items' slots.")
    items_complete: int
    reviewer: str | None = None
    reviewer_decided: int | None = Field(None, description="Items this reviewer has decided or skipped.")
    reviewer_available: int | None = Field(None, description="Items still open to this reviewer.")


class Assignment(Model):
    """The item a reviewer should look at now, with their claim on it."""

    item: ReviewItem
    claim: Claim
    progress: RoundProgress


class ReviewerStats(Model):
    reviewer: str
    decisions: int
    accepted: int
    edited: int
    rejected: int
    skipped: int
    accept_rate: float | None = Field(description="(accepted + edited) / (accepted + edited + rejected).")


class PairAgreement(Model):
    """Cohen's kappa of two reviewers over the items both judged."""

    reviewer_a: str
    reviewer_b: str
    items: int
    observed_agreement: float | None
    cohen_kappa: float | None


class ErrorTypeAgreement(Model):
    """Fleiss' kappa (for varying raters per item) over items with at least two verdicts."""

    error_type: str
    items: int = Field(description="Items with any accept/edit/reject verdict.")
    items_multi_rated: int = Field(description="Items with at least two verdicts, the ones kappa uses.")
    observed_agreement: float | None
    fleiss_kappa: float | None
    note: str = ""


class AgreementReport(Model):
    round: str
    decisions: int
    verdicts: int = Field(description="Decisions other than skips.")
    items: int
    items_multi_rated: int
    by_error_type: list[ErrorTypeAgreement]
    reviewers: list[ReviewerStats]
    pairs: list[PairAgreement]
    overall: ErrorTypeAgreement = Field(description="All error types pooled.")


class ImportSummary(Model):
    round: str
    rows: int
    imported: int
    already_present: int
    rejected_rows: list[str] = Field(default_factory=list, description="Rows not imported, with the reason.")

