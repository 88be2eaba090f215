"""Model calls through the llm-gateway: requests, results, per-request errors, batches."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from flawforge.proto.base import BlobRef, Message, Model
from flawforge.proto.inference import (NamedToolChoice, ResponseFormat, StreamOptions, TextPart, Tool, ToolCall, Usage,
                                       tool_choice_problem)


class ProviderConfig(Model):
    """A model provider, configured by name and reached through LiteLLM (docs/providers.md)."""

    name: str = ""
    litellm_provider: str = Field("openai", pattern=r"^[a-z0-9_]+$", description=(
        "LiteLLM's name of the API the provider speaks, sent as the model's prefix: openai (any OpenAI-compatible "
        "server: OpenAI, the inference-server, vLLM), gemini, anthropic, bedrock, vertex_ai, ollama..."))
    base_url: str | None = Field(None, description="Base URL of the API (an OpenAI-compatible one ends in /v1); "
                                                    "none: the hosted API's own.")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key (never the key).")
    models: list[str] = Field(default_factory=list,
                              description="Models served; empty: an OpenAI-compatible provider is asked (/v1/models).")
    litellm_params: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="More of LiteLLM's per-deployment settings (vertex_project, "
                                          "aws_region_name, api_version...), passed as they are.")
    fallbacks: list[str] = Field(default_factory=list, description=(
        "Models ('provider/model') asked in turn, each with its own retries, when this provider's retries are "
        "spent on a failure a retry may fix (unreachable, 5xx, 429)."))
    requests_per_minute: float | None = Field(None, gt=0, description="Requests per minute, shared by every replica "
                                                                       "through Redis; none: unlimited.")
    tokens_per_minute: float | None = Field(None, gt=0, description="Prompt and completion tokens per minute, shared "
                                                                     "by every replica through Redis; none: unlimited.")
    max_concurrency: int = Field(8, ge=1, description="Requests in flight at once, per gateway process.")
    timeout_s: float = Field(300.0, gt=0, description="Per-request timeout.")
    tools: bool = Field(True, description="The provider takes OpenAI's tools and tool_choice and answers with "
                                          "tool_calls; false: a request with tools is refused naming the provider.")
    json_schema: bool = Field(False, description="The provider enforces response_format json_schema (the "
                                                 "inference-server, vLLM, OpenAI): the schema is sent and an "
                                                 "invalid reply is not sent back for repair; otherwise the "
                                                 "schema is stated in the prompt and invalid replies repaired.")
    loop_guard: bool = Field(False, description="The provider takes the inference-server's decoding extensions "
                                                "(its transformers backend): llama.cpp's DRY repetition guard "
                                                "(dry_*) and json_closing_reserve. Every schema-enforced request "
                                                "is decoded with both, so a greedy loop is broken early and a "
                                                "reply cut at max_tokens still closes as valid JSON.")

    @property
    def openai_compatible(self) -> bool:
        """Speaks OpenAI's API: its models and readiness can be asked at /v1/models."""
        return self.litellm_provider == "openai"

    @model_validator(mode="after")
    def _check_models(self):
        if not self.models and not self.openai_compatible:
            raise ValueError(f"models: name the models served: only an OpenAI-compatible provider is asked for them, "
                             f"not a {self.litellm_provider} one")
        return self


def _unset(value) -> bool:
    return value is None


def _refuse(problem: str | None) -> None:
    """A validator's refusal of what `problem` names; none: nothing to refuse."""
    if problem:
        raise ValueError(problem)


def tool_turn_problem(role: str, tool_calls: list[ToolCall] | None, tool_call_id: str | None) -> str | None:
    """What is wrong with a turn's tool fields: calls are an assistant's, and a tool turn, only it, names the call it
    answers. None when nothing is."""
    if tool_calls is not None and role != "assistant":
        return "tool_calls belong to an assistant turn"
    if (role == "tool") != (tool_call_id is not None):
        return "a tool turn, and only a tool turn, names the call it answers (tool_call_id)"
    return None


class ChatMessage(Model):
    """A turn in OpenAI's chat format: an assistant's turn may carry tool calls, a tool's turn answers one of them.
    The tool fields are left out of the dump where unset, so a message without them has the fingerprint it had
    before tool calls were carried."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] | None = Field(None, exclude_if=_unset, description="The calls an assistant turn made.")
    tool_call_id: str | None = Field(None, exclude_if=_unset, description="The call a tool turn answers.")

    @model_validator(mode="after")
    def _check_tool_fields(self):
        _refuse(tool_turn_problem(self.role, self.tool_calls, self.tool_call_id))
        return self


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
    tools: list[Tool] | None = Field(None, max_length=128, description="Functions the model may call (OpenAI's "
                                     "tools); part of the request's fingerprint.")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description="OpenAI's tool_choice; unset: the provider's default (auto with tools).")

    @model_validator(mode="after")
    def _check_tools(self):
        _refuse(tool_choice_problem(self.tools, self.tool_choice))
        return self

    def tool_fields(self) -> dict[str, Any]:
        """tools and tool_choice in OpenAI's shape, those that were set (none for a request without tools)."""
        fields: dict[str, Any] = {}
        if self.tools:
            fields["tools"] = [tool.model_dump(exclude_none=True) for tool in self.tools]
        if self.tool_choice is not None:
            fields["tool_choice"] = (self.tool_choice if isinstance(self.tool_choice, str)
                                     else self.tool_choice.model_dump(exclude_none=True))
        return fields

    def parameters(self) -> dict[str, Any]:
        """The sampling parameters that were set."""
        names = ("max_tokens", "temperature", "top_p", "stop", "seed", "frequency_penalty", "json_closing_reserve", "dry_multiplier",
                 "dry_allowed_length", "dry_sequence_breakers")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


class OpenAIChatMessage(Model):
    """A turn as OpenAI's clients send it: an assistant's turn may carry the calls it made (its content null then),
    a tool's turn answers one of them."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = Field(None, description="Accepted as OpenAI takes it; not sent on.")
    tool_calls: list[ToolCall] | None = Field(None, description="The calls an assistant turn made.")
    tool_call_id: str | None = Field(None, description="The call a tool turn answers.")

    @model_validator(mode="after")
    def _check_tool_fields(self):
        _refuse(tool_turn_problem(self.role, self.tool_calls, self.tool_call_id))
        if self.content is None and not self.tool_calls:
            raise ValueError("content may be null only in an assistant turn that makes tool calls")
        return self

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class OpenAIChatRequest(Model):
    """The body of the gateway's OpenAI-compatible /v1/chat/completions: the fields it serves. Any other field is
    refused naming it, never dropped unseen; n > 1 and logprobs are not served."""

    model: str = Field(min_length=1, description="'provider/model', or a model one configured provider serves.")
    messages: list[OpenAIChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=131072)
    max_completion_tokens: int | None = Field(None, ge=1, le=131072, description="Newer name of max_tokens; wins.")
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="OpenAI's default, 1.")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = Field(None, max_length=128, description="Functions the model may call.")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    n: Literal[1] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, description="Accepted as OpenAI takes it; the caller is the token's owner.")

    @model_validator(mode="after")
    def _check_tools(self):
        _refuse(tool_choice_problem(self.tools, self.tool_choice))
        return self

    def chat_request(self) -> ChatRequest:
        """The gateway's own request (its fingerprint is the cache's key): a developer turn is a system turn, a
        json_object format the schema of any object; tools, tool_choice and the turns' calls as they came."""
        schema = None
        if self.response_format is not None and self.response_format.type == "json_schema":
            schema = self.response_format.json_schema.json_schema
        elif self.response_format is not None and self.response_format.type == "json_object":
            schema = {"type": "object"}
        return ChatRequest(
            model=self.model, max_tokens=self.max_completion_tokens or self.max_tokens or 256,
            messages=[ChatMessage(role="system" if m.role == "developer" else m.role, content=m.text,
                                  tool_calls=m.tool_calls, tool_call_id=m.tool_call_id)
                      for m in self.messages],
            temperature=self.temperature, top_p=self.top_p, seed=self.seed,
            stop=[self.stop] if isinstance(self.stop, str) else self.stop,
            frequency_penalty=self.frequency_penalty, response_schema=schema, tools=self.tools,
            tool_choice=self.tool_choice)


class ChatResult(Model):
    fingerprint: str
    provider: str
    model: str = Field(description="The model that answered, as the provider names it.")
    content: str
    tool_calls: list[ToolCall] | None = Field(None, exclude_if=_unset, description="The calls the reply made, each "
                                              "with its id, function name and arguments (JSON text).")
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
    created_by: str | None = Field(None, description="The caller whose budget its rows spend, retries included; "
                                                     "none: a job's batch (its job's budget) or an older record.")
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
