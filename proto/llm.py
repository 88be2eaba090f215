"""Model calls through the llm-gateway: requests, results, per-request errors, batches."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from flawforge.proto.base import BlobRef, Message, Model
from flawforge.proto.inference import Usage


class ProviderConfig(Model):
    """An OpenAI-compatible endpoint, configured by name."""

    name: str = ""
    base_url: str = Field(description="Base URL of the OpenAI-compatible API, ending in /v1.")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key (never the key).")
    models: list[str] = Field(default_factory=list,
                              description="Models served; empty: ask the provider's /v1/models.")
    requests_per_minute: float | None = Field(None, gt=0, description="Rate limit; none: unlimited.")
    max_concurrency: int = Field(8, ge=1, description="Requests in flight at once.")
    timeout_s: float = Field(300.0, gt=0, description="Per-request HTTP timeout.")
    json_schema: bool = Field(False, description="The provider enforces response_format json_schema (the "
                                                 "inference-server, vLLM, OpenAI): the schema is sent and an "
                                                 "invalid reply is not sent back for repair; otherwise the "
                                                 "schema is stated in the prompt and invalid replies repaired.")
    loop_guard: bool = Field(False, description="The provider takes the inference-server's decoding extensions "
                                                "(its transformers backend): llama.cpp's DRY repetition guard "
                                                "(dry_*) and json_closing_reserve. Every schema-enforced request "
                                                "is decoded with both, so a greedy loop is broken early and a "
                                                "reply cut at max_tokens still closes as valid JSON.")


class ChatMessage(Model):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(Model):
    """One chat completion, in the shape of the OpenAI API's request body (the fields we use)."""

    model: str = Field(min_length=1, description="A model a configured provider serves, or 'provider/model'.")
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int = Field(256, ge=1, le=131072)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: list[str] | None = None
    seed: int | None = None
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    json_closing_reserve: int | None = Field(None, ge=0, description="The inference-server's extension: the last "
                                             "tokens of max_tokens close a schema-constrained reply.")
    dry_multiplier: float | None = Field(None, ge=0.0, description="Repetition guard of the providers that have "
                                         "one (llama.cpp's DRY sampler, the inference-server): sent only when set.")
    dry_allowed_length: int | None = Field(None, ge=1, description="Repeats up to this long are not penalised.")
    dry_sequence_breakers: list[str] | None = Field(None, description="Strings a repeat does not run across.")
    response_schema: dict[str, Any] | None = Field(
        None, description="JSON schema the reply must match; part of the request's fingerprint.")

    def parameters(self) -> dict[str, Any]:
        """The sampling parameters that were set."""
        names = ("max_tokens", "temperature", "top_p", "stop", "seed", "frequency_penalty", "json_closing_reserve", "dry_multiplier",
                 "dry_allowed_length", "dry_sequence_breakers")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


class ChatResult(Model):
    fingerprint: str
    provider: str
    model: str = Field(description="The model that answered, as the provider names it.")
    content: str
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cached: bool = Field(False, description="Served from the fingerprint cache: no model call was made.")


class CallError(Model):
    code: str = Field(description="unknown_model, context_length_exceeded, invalid_request, invalid_output, "
                                  "budget_exceeded, cancelled, replay_miss, malformed_batch_line, provider_error...")
    message: str


class BatchRow(Model):
    custom_id: str = Field(min_length=1, max_length=200)
    request: ChatRequest
    line: int | None = Field(None, description="Line of the batch file it came from.")


RowStatus = Literal["pending", "submitted", "succeeded", "failed"]


class BatchRowState(Model):
    custom_id: str
    line: int | None = Field(None, description="Line of the batch file; rows are kept in file order.")
    fingerprint: str | None = None
    status: RowStatus = "pending"
    attempts: int = 0
    error: CallError | None = None
    provider_batch_id: str | None = None


class ProviderBatch(Model):
    """One batch as the provider knows it; a gateway batch may need several (resubmitted rows)."""

    id: str
    provider: str
    status: str
    input_file_id: str
    custom_ids: list[str]
    output_file_id: str | None = None
    error_file_id: str | None = None
    collected: bool = False


class BatchRecord(Model):
    """A gateway batch, persisted so a crashed job resumes polling instead of paying again."""

    schema_version: int = 1
    batch_id: str
    state: Literal["in_progress", "completed", "cancelled"]
    created_at: datetime
    updated_at: datetime
    rows: list[BatchRowState]
    provider_batches: list[ProviderBatch] = Field(default_factory=list)


class RowResult(Model):
    custom_id: str
    result: ChatResult | None = None
    error: CallError | None = None


CHAT_QUEUE = "llm.chat"  # ChatRequested
BATCH_QUEUE = "llm.batches"  # BatchDriveRequested


class ChatRequested(Message):
    """Asks the llm-gateway to run one request (a ChatRequest blob) and store a RowResult at the job's item."""

    kind = "llm.chat_requested"
    job_id: str
    item: str
    request: BlobRef


class BatchDriveRequested(Message):
    """Asks the llm-gateway to poll a persisted batch until every row is settled."""

    kind = "llm.batch_drive_requested"
    batch_id: str


class TemplateGenerationReport(Model):
    """What a template-generation run asked for, what came back, and how much of it passed validation."""

    schema_version: int = 1
    model: str
    indices: str
    requested: int = Field(description="Problems in the index range.")
    skipped_existing: int = Field(description="Problems that already have a template.")
    attempted: int = Field(description="Problems a template was asked for.")
    parsed: int = Field(description="Replies that parsed as a template (after repairs).")
    passed: int = Field(description="Templates that passed validation and were kept.")
    pass_rate: float = Field(description="passed / attempted; 0 when nothing was attempted.")
    rejects_by_reason: dict[str, int] = Field(default_factory=dict)
    model_calls: int = Field(description="Replies that cost a model call (not served from the cache).")
    cache_hits: int
    repairs: int = Field(description="Repair requests sent after invalid replies.")
    loop_retries: int = Field(0, description="Replies cut at max_tokens under an enforced schema that were asked "
                                             "for again with a frequency penalty (providers without the loop guard).")
    closed_at_budget: int = Field(0, description="Parsed replies that ended at the token budget (their JSON "
                                                 "closed within the provider's closing reserve).")
    prompt_tokens: int = 0
    completion_tokens: int = 0
