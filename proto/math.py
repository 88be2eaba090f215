"""Math error pipeline: work items, candidates, rejects; the templates pipeline's reply from a model."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flawforge.proto.base import BlobRef, Message, Model, WorkUnit
from flawforge.proto.sandbox import ExecutionResult
from flawforge.proto.values import TraceStep, TypedValue

Family = Literal["computational", "conceptual"]

COMPUTATIONAL_TYPES = (
    "off_by_n", "off_by_factor_of_10", "digit_transposition", "stem_off_by_n", "decimal_shift",
    "float_off_by_n", "fraction_reciprocal", "fraction_part_off_by_one", "multiplication_by_reciprocal",
)
CONCEPTUAL_TYPES = (
    "operator_swap", "incomplete_calculation", "incorrect_operand", "input_misrepresentation",
    "incorrect_final_answer_selection",
)


class FamilyCaps(Model):
    """How many candidates of one error family one problem may keep: per error type, per line and in all.
    None: no limit. All three are required: a family's defaults differ, so a partial one would be ambiguous."""

    model_config = {"frozen": True, "extra": "forbid"}
    per_type: int | None = Field(ge=1, le=1_000_000)
    per_line: int | None = Field(ge=1, le=1_000_000)
    total: int | None = Field(ge=1, le=1_000_000)


# The seed notebook kept at most 2 conceptual errors of a type, 2 on a line and 5 in all
# (flawforge.math.selection.SEED_CAPS). The human reviewers' sample was drawn from every plausible
# conceptual error of a problem (about 26 on the reviewed problems), so 5 keep about half of what they
# accepted in any order; these keep 82.5% of it (docs/math-text.md).
DEFAULT_CONCEPTUAL_CAPS = FamilyCaps(per_type=8, per_line=5, total=24)


class Caps(Model):
    """How many candidates one problem may keep, per error family."""

    model_config = {"frozen": True, "extra": "forbid"}
    computational: FamilyCaps = FamilyCaps(per_type=2, per_line=2, total=None)
    conceptual: FamilyCaps = DEFAULT_CONCEPTUAL_CAPS

    def of(self, family: str) -> FamilyCaps:
        return self.conceptual if family == "conceptual" else self.computational

    @model_validator(mode="before")
    @classmethod
    def _not_the_flat_form(cls, data: Any) -> Any:
        """The flat form of earlier versions ({"per_type": 2, "conceptual": 5}) is refused by name, not misread."""
        if isinstance(data, dict):
            flat = sorted(key for key, value in data.items() if key in ("per_type", "per_line") or (
                key in ("computational", "conceptual") and not isinstance(value, (dict, FamilyCaps))))
            if flat:
                raise ValueError(f"{flat}: caps are given per error family, as {{'conceptual': {{'per_type': N, "
                                 f"'per_line': N, 'total': N}}, 'computational': {{...}}}} (N or null)")
        return data


class ProblemTemplate(Model):
    """A GSM8K problem with the formalization template chosen for it (validated)."""

    problem_index: int
    tier: str
    template_model: str
    question: str
    gsm8k_answer: str = Field(description="GSM8K's full solution text, ending with '#### <answer>'.")
    final_answer: str = Field(description="GSM8K's final answer, as written after '####'.")
    code: str = Field(description="Python source defining solve().")
    logical_steps: list[dict] = Field(description="The template's logical_steps entries, as in its JSON.")


class TemplateValidation(Model):
    """The verdict on one template; the scores are computed as the original project's validation report did."""

    problem_index: int
    tier: str
    template_model: str
    valid: bool
    reason: str | None = Field(None, description="Why the template is unusable: invalid_template, not_executable, "
                                                 "answer_mismatch, inconsistent_steps, malformed_text.")
    detail: str = ""
    answer_check_status: Literal["pass", "fail_wrong_answer", "fail_not_executable"] | None = Field(
        None, description="The original project's exact answer check; None when the code never ran.")
    structural_score: float | None = None
    semantic_score: float | None = Field(None, description="Only when the structure matches fully and the "
                                                           "original's statement-by-statement trace succeeds.")
    structural_mismatches: list[str] = Field(default_factory=list, description="Solution lines whose text "
                                                                                "differs from the template's.")
    semantic_mismatches: list[str] | None = Field(None, description="Variables whose value differs from the "
                                                                    "number in the GSM8K solution.")


class ValidateTemplateRequest(Model):
    """A template to check against a GSM8K solution."""

    problem_index: int = Field(0, ge=0)
    template_model: str = "unknown"
    gsm8k_answer: str = Field(description="GSM8K's full solution text, ending with '#### <answer>'.")
    code: str = Field(description="Python source defining solve().")
    logical_steps: list[dict]


class Candidate(Model):
    """One flawed solution, with everything needed to review, audit or reproduce it."""

    schema_version: int = 1
    id: str = Field(description="Content hash of the fields that define the candidate.")
    problem_index: int
    tier: str
    template_model: str
    family: Family
    error_type: str
    target_variable: str
    erroneous_line_number: str = Field(description="'L<k>' or 'FA'")
    correct_value: TypedValue
    flawed_value: TypedValue
    correct_final_answer: TypedValue
    flawed_final_answer: TypedValue
    mutated_code: str
    # Left out unless asked for (`with_traces`): two traces are three quarters of a candidate's bytes, and
    # `mutated_code` reproduces them.
    correct_trace: list[TraceStep] | None = Field(None, exclude_if=lambda trace: trace is None,
                                                  description="The correct template's trace (only with_traces).")
    flawed_trace: list[TraceStep] | None = Field(None, exclude_if=lambda trace: trace is None,
                                                 description="The mutated code's trace (only with_traces).")
    original_solution: str
    flawed_solution: str
    explanation: str
    mutation: dict = Field(default_factory=dict, description="Parameters of the mutation, for audit.")
    seed: int


class Reject(Model):
    """Why a problem or template produced nothing (or less than it could)."""

    schema_version: int = 1
    problem_index: int
    tier: str | None = None
    template_model: str | None = None
    reason: str = Field(description="Machine-readable reason, e.g. invalid_template, not_executable, "
                                    "no_applicable_mutation, answer_mismatch.")
    detail: str = ""


class ValidatedTemplate(Model):
    """A problem's chosen template with the sandbox's traced run of its solve() from validation (None where
    that run was not kept): the mutator starts from it instead of running the template again."""

    template: ProblemTemplate
    run: ExecutionResult | None = None


class BatchProblem(Model):
    """One problem of a ProblemBatch."""

    problem_index: int
    tier: str
    template_model: str
    seed: int = Field(description="The problem's seed, derived from the job's seed, the problem and its template.")


class ProblemBatch(Message):
    """GSM8K problems with their chosen templates, handed from the template-loader to the mutator as one work
    item: one message, and one result file, for several problems (a file a problem costs more to create than
    the problem costs to generate)."""

    kind = "math.problem_batch"
    job_id: str
    item: str = Field(description="The batch's name among the job's work items: its result's item key.")
    problems: list[BatchProblem] = Field(min_length=1)
    templates: BlobRef = Field(description="JSON lines: a ValidatedTemplate for each problem, in the order of "
                                           "`problems`.")
    families: list[Family]
    caps: Caps = Field(default_factory=Caps)
    with_traces: bool = Field(False, description="Whether candidates carry the correct and flawed traces.")


class ProblemResult(Model):
    """What one problem of a work item produced."""

    problem_index: int
    candidates: list[Candidate] = Field(description="In catalog order: family, error type, target variable, id.")
    rejects: list[Reject]


class ProblemBatchResult(Model):
    """What a ProblemBatch produced, stored as this model's JSON at the job's item key (the batch's `item`): one
    file a work item, not one a problem."""

    problems: list[ProblemResult] = Field(description="Each problem's result, in the order of the batch's "
                                                      "`problems`.")


PROBLEMS = WorkUnit(queue="math.problems", message=ProblemBatch, result=ProblemBatchResult)


# --- the templates pipeline: a formalization template, as a model writes it ---------------------------

# Lists are bounded a little above the shared templates' largest (9 steps; 8 inputs is ample). Strings
# that hold newlines and quotes carry no length bounds: with xgrammar 0.2.8 a bounded string admits
# no escape sequence, and a maxLength of a few hundred characters takes a minute to compile
# (docs/compatibility.md). Empty ones fail the template's validation instead.
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class LogicalStep(BaseModel):
    model_config = ConfigDict(extra="ignore")

    line_number: str = Field(pattern=r"^L[1-9][0-9]?$")
    question_inputs: list[Identifier] = Field(default_factory=list, max_length=8)
    WK_inputs: list[Identifier] = Field(default_factory=list, max_length=8)
    output_variable: Identifier
    solution_line_template: str


class FormalizationReply(BaseModel):
    """What the model must answer: the template's code and its logical steps."""

    model_config = ConfigDict(extra="ignore")

    code: str = Field(description="Python source defining solve().")
    logical_steps: list[LogicalStep] = Field(min_length=1, max_length=12)
