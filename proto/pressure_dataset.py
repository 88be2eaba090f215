"""The semantic-pressure dataset stage (seed 001, modules 1-2): candidates, rejects, the validator's
reply and the run's summary. The dataset's rows themselves are `PromptRecord`s (proto/pressure.py)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from flawforge.proto.base import Model
from flawforge.proto.pressure import Category

# A reply's text field that says something: a character at least, no space at either end. The pattern goes into the
# JSON schema, so a server that enforces the schema while decoding cannot close the string empty, and a provider
# that does not is refused by validation.
Said = Annotated[str, StringConstraints(min_length=1, pattern=r"^\S(.*\S)?$")]

Stage = Literal["source", "fallback", "filter", "validator", "pressure", "selection"]


class Candidate(Model):
    """A question whose one natural one-word answer should be `target_word`, before validation."""

    candidate_id: str = Field(description="Stable id: a hash of category, question and target.")
    category: Category
    question_text: str
    target_word: str
    source: str = Field(description="offline:<dataset> or llm:<model> (a batch fallback).")
    detail: dict[str, str] = Field(default_factory=dict, description="Where it came from: subject, relation, "
                                                                      "idiom, template, requested target...")


class CandidateReject(Model):
    candidate: Candidate
    stage: Stage
    reason: str = Field(description="A stable code, e.g. target_in_prompt, not_two_sentences, invalid_output, "
                                    "empty_reply.")
    detail: str = ""


def _bare(schema: dict) -> None:
    """Drops the schema's description and its fields' titles."""
    schema.pop("description", None)
    for field in schema.get("properties", {}).values():
        field.pop("title", None)


class ValidatorReply(Model):
    """What the validator model returns for one candidate (strict JSON). Its schema has no descriptions or
    field titles: it goes into every validation prompt, and the rubric there says what each field means."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_bare)

    is_one_word_answer_enforced: bool
    best_one_word_answer: Said
    top3_one_word_answers: list[Said] = Field(min_length=1, max_length=3)
    is_X_best: bool
    ambiguity_score: int = Field(ge=0, le=10)
    leaks_answer: bool
    naturalness_score: int = Field(ge=0, le=10)
    comments: str = ""


class AuditRecord(Model):
    """One model request or its response, in audit.jsonl; `candidate_ids` link it to the candidates."""

    audit_id: str = Field(description="<stage>/<row>: the request and its response share it.")
    kind: Literal["request", "response"]
    stage: Literal["fallback", "validator", "pressure"]
    candidate_ids: list[str] = Field(default_factory=list, description="Candidates made from or judged by it.")
    model: str
    request: dict | None = None
    response: str | None = Field(None, description="The reply's text as the model wrote it.")
    error: str | None = None
    cached: bool | None = None
