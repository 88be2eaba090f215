"""The inference-server's API: OpenAI-compatible chat, completions, models, files and batches,
plus the research endpoints (score, trace, logit lens, patch)."""
from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from flawforge.proto.base import BlobRef, Message, Model

# --- OpenAI-compatible requests -----------------------------------------------------------------


class OpenAIRequest(Model):
    """A request an OpenAI client sends: fields this server does not know are ignored (and named in the
    response's `x-flawforge-ignored-fields` header), as OpenAI and vLLM ignore them; known fields are checked."""

    model_config = ConfigDict(extra="allow")

    def ignored_fields(self) -> list[str]:
        """Dotted paths of every field that was sent but is not understood."""
        found: list[str] = []

        def walk(value, path: str) -> None:
            if isinstance(value, OpenAIRequest):
                found.extend(f"{path}{name}" for name in (value.model_extra or {}))
                for name in type(value).model_fields:
                    walk(getattr(value, name), f"{path}{name}.")
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    walk(item, f"{path[:-1]}[{index}].")

        walk(self, "")
        return found


class TextPart(OpenAIRequest):
    type: Literal["text"]
    text: str


class FunctionCall(OpenAIRequest):
    name: str
    arguments: str = Field(description="The arguments as JSON text.")


class ToolCall(OpenAIRequest):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(OpenAIRequest):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = Field(None, description="Calls an assistant turn made.")
    tool_call_id: str | None = Field(None, description="The call a tool message answers.")

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class JsonSchemaFormat(OpenAIRequest):
    model_config = ConfigDict(extra="allow", populate_by_name=True, serialize_by_alias=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    json_schema: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(OpenAIRequest):
    """text; json_object: one JSON object; json_schema: one JSON value matching the schema. Both JSON
    formats are enforced while decoding (grammar-constrained), so a reply cut by max_tokens is the only
    way to get a non-matching one (finish_reason "length")."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _check_schema(self):
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is required with type 'json_schema' and allowed only with it")
        return self


class FunctionDefinition(OpenAIRequest):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None


class Tool(OpenAIRequest):
    type: Literal["function"]
    function: FunctionDefinition


class ToolChoiceFunction(OpenAIRequest):
    name: str


class NamedToolChoice(OpenAIRequest):
    type: Literal["function"]
    function: ToolChoiceFunction


def tool_choice_problem(tools: list[Tool] | None, tool_choice) -> str | None:
    """What is wrong with a tool_choice beside its tools: one that asks for a call needs tools, a named one must be
    among them. None when nothing is."""
    if tool_choice not in (None, "none", "auto") and not tools:
        return "tool_choice needs tools"
    if isinstance(tool_choice, NamedToolChoice):
        names = [tool.function.name for tool in tools]
        if tool_choice.function.name not in names:
            return f"tool_choice names {tool_choice.function.name!r}, which is not among the tools {names}"
    return None


class StreamOptions(OpenAIRequest):
    include_usage: bool = Field(False, description="A last chunk with the usage of the whole request.")


class SamplingRequest(OpenAIRequest):
    """Fields the chat and text completion requests share."""

    model: str
    n: int = Field(1, ge=1, le=16, description="Completions to sample for the prompt.")
    seed: int | None = Field(None, description="Same seed and request: same output. None: a random seed.")
    temperature: float = Field(1.0, ge=0, le=2, description="0 is greedy decoding.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling: keep the most likely tokens up to this mass.")
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = Field(None, description="Up to 4 strings that end a completion (not included).")
    presence_penalty: float = Field(0.0, ge=-2, le=2, description="Subtracted from the logit of every token "
                                                                   "already generated.")
    frequency_penalty: float = Field(0.0, ge=-2, le=2, description="Subtracted from a token's logit once per "
                                                                    "time it was generated.")
    logit_bias: dict[str, float] | None = Field(None, description="Token id (as a string) -> value added to its "
                                                                  "logit, -100 to 100.")
    json_closing_reserve: int = Field(0, ge=0, description="An extension: with response_format json_schema (or "
                                      "json_object), once this many tokens of max_tokens are left the reply takes "
                                      "every closing mark the grammar allows, so it ends as valid JSON (finish_reason "
                                      "'length'). 0: off. At most half of max_tokens (a 400 otherwise).")
    dry_multiplier: float = Field(0.0, ge=0, le=100, description="Repetition guard (llama.cpp's DRY sampler; an "
                                  "extension, off at 0): a token that would extend a repeat of an earlier run of "
                                  "the completion loses multiplier * base ** (run length - allowed length).")
    dry_base: float = Field(1.75, ge=1, le=10, description="Growth of the repetition guard's penalty per token.")
    dry_allowed_length: int = Field(2, ge=1, le=1000, description="Repeats up to this long are not penalised.")
    dry_penalty_last_n: int = Field(-1, ge=-1, description="Tokens of the completion the guard looks back over; "
                                                          "-1: all of them.")
    dry_sequence_breakers: list[str] = Field(["\n", ":", '"', "*"], max_length=16, description=(
        "A repeat does not run across a token holding one of these strings."))
    stream: bool = Field(False, description="Server-sent events, one chunk per step, then `data: [DONE]`.")
    stream_options: StreamOptions | None = None
    user: str | None = None

    @model_validator(mode="after")
    def _check_sampling(self):
        if isinstance(self.stop, list) and (len(self.stop) > 4 or not all(self.stop)):
            raise ValueError("stop takes at most 4 non-empty strings")
        if self.stop == "":
            raise ValueError("stop must not be empty")
        if not all(0 < len(breaker) <= 20 for breaker in self.dry_sequence_breakers):
            raise ValueError("dry_sequence_breakers take strings of 1 to 20 characters")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        for token, value in (self.logit_bias or {}).items():
            if not token.isdigit():
                raise ValueError(f"logit_bias keys are token ids, got {token!r}")
            if not -100 <= value <= 100:
                raise ValueError(f"logit_bias values lie within -100..100, got {value} for token {token}")
        return self

    @property
    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="Newer name of max_tokens; wins over it.")
    logprobs: bool = Field(False, description="Return the log-probability of each sampled token (of the unscaled "
                                              "model distribution).")
    top_logprobs: int | None = Field(None, ge=0, le=20, description="Alternatives per token; needs logprobs.")
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description="none: no call; auto (the default with tools): the model decides; required or a "
                          "named function: the reply is one call. Calls are grammar-constrained to the "
                          "function's parameters.")
    parallel_tool_calls: bool | None = Field(None, description="Accepted; a reply makes one call at most.")

    @model_validator(mode="after")
    def _check_chat(self):
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs set to true")
        problem = tool_choice_problem(self.tools, self.tool_choice)
        if problem:
            raise ValueError(problem)
        if self.tools and self.response_format is not None and self.response_format.type != "text" and \
                self.tool_choice != "none":
            raise ValueError("response_format json_object or json_schema cannot be combined with tools")
        return self


class CompletionRequest(SamplingRequest):
    prompt: str | list[str] = Field(description="One prompt or several; choices come n per prompt, in order.")
    max_tokens: int | None = Field(16, ge=0, description="0 (with echo): score the prompt, generate nothing.")
    logprobs: int | None = Field(None, ge=0, le=5, description="Return the sampled token's log-probability and this "
                                                              "many alternatives per token.")
    echo: bool = Field(False, description="Start each choice's text (and logprobs) with its prompt.")
    suffix: None = Field(None, description="Not supported: the served models have no infill mode.")
    best_of: int | None = Field(None, ge=1, le=16, description="Accepted when it equals n (or is unset).")

    @model_validator(mode="after")
    def _check_prompt(self):
        if isinstance(self.prompt, list) and not self.prompt:
            raise ValueError("prompt must hold at least one string")
        if self.max_tokens == 0 and not self.echo:
            raise ValueError("max_tokens 0 needs echo (it scores the prompt and generates nothing)")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of other than n is not supported")
        return self

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


# --- OpenAI-compatible responses ----------------------------------------------------------------


class Usage(Model):
    """Token counts of a call; providers that omit a count report 0."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class TopLogprob(Model):
    token: str
    logprob: float
    bytes: list[int] = Field(description="The token's own UTF-8 bytes: part of a character where a token "
                                         "holds only part of one.")


class TokenLogprob(Model):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Model):
    content: list[TokenLogprob]


class AssistantMessage(Model):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None


FinishReason = Literal["stop", "length", "tool_calls"]


class ChatChoice(Model):
    index: int
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(Model):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str


class ToolCallDelta(Model):
    index: int
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChunkDelta(Model):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(Model):
    index: int
    delta: ChunkDelta
    finish_reason: FinishReason | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(Model):
    """One server-sent event of a streamed chat completion; the usage chunk has no choices."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    system_fingerprint: str
    usage: Usage | None = None


class CompletionLogprobs(Model):
    tokens: list[str]
    token_logprobs: list[float | None] = Field(description="None for the first prompt token of an echo.")
    top_logprobs: list[dict[str, float] | None] = Field(description="None for echoed prompt tokens.")
    text_offset: list[int]


class CompletionChoice(Model):
    index: int
    text: str
    finish_reason: FinishReason | None
    logprobs: CompletionLogprobs | None = None


class Completion(Model):
    """A text completion, or (object the same, as OpenAI streams it) one chunk of a streamed one."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None
    system_fingerprint: str


class ModelCard(Model):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(Model):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(Model):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(Model):
    """OpenAI's error body, answered with every 4xx/5xx of the OpenAI-compatible endpoints."""

    error: ErrorDetail


# --- Files and batches (OpenAI Batch API) -------------------------------------------------------


class FileObject(Model):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: Literal["batch", "batch_output"]


class FileList(Model):
    object: Literal["list"] = "list"
    data: list[FileObject]
    has_more: bool = False


class FileDeleted(Model):
    id: str
    object: Literal["file"] = "file"
    deleted: bool


BatchEndpoint = Literal["/v1/chat/completions", "/v1/completions"]


class BatchStatus(str, Enum):
    validating = "validating"
    failed = "failed"
    in_progress = "in_progress"
    finalizing = "finalizing"
    completed = "completed"
    expired = "expired"
    cancelling = "cancelling"
    cancelled = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (BatchStatus.failed, BatchStatus.completed, BatchStatus.expired, BatchStatus.cancelled)


class BatchCreate(Model):
    input_file_id: str
    endpoint: BatchEndpoint
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = Field(None, max_length=16)


class BatchError(Model):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(Model):
    object: Literal["list"] = "list"
    data: list[BatchError]


class RequestCounts(Model):
    total: int = 0
    completed: int = 0
    failed: int = 0


class BatchUsage(Model):
    """Tokens of the batch's answered requests, as OpenAI's batch object counts them."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class Batch(Model):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: BatchEndpoint
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: Literal["24h"]
    status: BatchStatus
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: RequestCounts = Field(default_factory=RequestCounts)
    model: str | None = Field(None, description="The model that answered; None until a request is answered.")
    usage: BatchUsage = Field(default_factory=BatchUsage)
    metadata: dict[str, str] | None = None
    created_by: str | None = Field(None, description="The caller (its FLAWFORGE_API_TOKENS name) that created the "
                                                     "batch: each line is bounded by that caller's cap on completion "
                                                     "tokens. None on batches recorded before it was kept.")


class BatchList(Model):
    object: Literal["list"] = "list"
    data: list[Batch]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class BatchRequestLine(Model):
    """One line of a batch input file."""

    custom_id: str = Field(min_length=1)
    method: Literal["POST"]
    url: BatchEndpoint
    body: dict[str, Any]


class BatchLineResponse(Model):
    status_code: int
    request_id: str
    body: dict[str, Any]


class BatchLineError(Model):
    code: str
    message: str


class BatchOutputLine(Model):
    """One line of a batch output or error file: a response (maybe an HTTP error) or a line-level error."""

    id: str
    custom_id: str | None
    response: BatchLineResponse | None = None
    error: BatchLineError | None = None


BATCH_QUEUE = "inference.batches"  # BatchRequested


class BatchRequested(Message):
    """Asks the inference-server's worker to run a batch recorded in the blob store."""

    kind = "inference.batch_requested"
    batch_id: str


# --- Research endpoints -------------------------------------------------------------------------


TokenSpec = str | int  # a token given as its text (it must encode to exactly one token) or as its id


class ScoreItem(Model):
    prompt: str = Field(min_length=1)
    continuations: list[str] = Field(min_length=1, max_length=256,
                                     description="Each tokenised on its own and appended to the prompt's tokens; "
                                                 "start it with a space where a word follows the prompt.")


class ScoreRequest(Model):
    model: str
    items: list[ScoreItem] = Field(min_length=1, max_length=1024)


class ContinuationScore(Model):
    text: str
    tokens: list[str]
    token_logprobs: list[float]
    logprob: float = Field(description="Sum of token_logprobs: log P(continuation | prompt).")
    prob: float


class ScoreResult(Model):
    prompt_tokens: int
    continuations: list[ContinuationScore]


class ScoreResponse(Model):
    model: str
    results: list[ScoreResult]


class TraceRequest(Model):
    model: str
    prompts: list[str] = Field(min_length=1, max_length=64)
    full_sequence: bool = Field(False, description="Store the hidden states of every position, not only the "
                                                   "last token's.")
    attention_positions: int = Field(1, ge=1, le=256, description="Attention rows kept per layer and head: those "
                                                                  "of the last this many query positions, each "
                                                                  "over every key.")


class TraceResult(Model):
    blob: BlobRef = Field(description="torch.save of a dict (docs/traces.md): model, model_revision, input_ids, "
                                      "positions, hidden_states [layers+1, positions, hidden] (0: embeddings, l: "
                                      "residual stream after block l, before the final norm), "
                                      "attention_positions, attentions [layers, heads, attention_positions, keys], "
                                      "next_token_id, next_token_prob; float32.")
    download: str = Field(description="Path of this server's route that streams the blob (authenticated).")
    tokens: list[str]
    positions: list[int]
    next_token: str
    next_token_id: int
    next_token_prob: float
    num_layers: int


class TraceResponse(Model):
    model: str
    model_revision: str = Field(description="sha256 of the model's files: the exact weights traced.")
    results: list[TraceResult]


class TargetToken(Model):
    token_id: int
    token: str


class LayerReadout(Model):
    layer: int = Field(description="0: embeddings; l: residual stream after block l.")
    probs: list[float] = Field(description="Probability of each target token, in the order of `targets`.")
    top_token: str
    top_prob: float


class LensRequest(Model):
    model: str
    prompts: list[str] = Field(min_length=1, max_length=64)
    targets: list[TokenSpec] = Field(min_length=1, max_length=100)
    position: int = Field(-1, description="Token position read out; negative counts from the end.")


class LensResult(Model):
    tokens: list[str]
    position: int
    layers: list[LayerReadout]


class LensResponse(Model):
    model: str
    targets: list[TargetToken]
    results: list[LensResult]


class PatchRequest(Model):
    model: str
    source: str = Field(min_length=1, description="Prompt whose residual stream is cached.")
    target: str = Field(min_length=1, description="Prompt the cached residual stream is patched into.")
    targets: list[TokenSpec] = Field(min_length=1, max_length=100)
    layers: list[int] | None = Field(None, description="Residual-stream layers to patch (0: embeddings, l: after "
                                                       "block l); None: every layer.")
    positions: list[int] | None = Field(None, description="Positions patched, the same index in both prompts "
                                                          "(negative counts from each end); None: every "
                                                          "position, which needs prompts of equal length.")
    read_position: int = Field(-1, description="Position of the target prompt whose next-token probabilities "
                                               "are read.")
    mode: Literal["together", "each"] = Field("together", description="together: one run patching every chosen "
                                                                      "layer; each: one run per layer.")


class Readout(Model):
    probs: list[float]
    top_token: str
    top_prob: float


class PatchedReadout(Readout):
    layers: list[int]
    delta: list[float] = Field(description="probs minus the baseline's.")


class PatchResponse(Model):
    model: str
    targets: list[TargetToken]
    baseline: Readout
    patched: list[PatchedReadout]


class PressureItem(Model):
    prompt: str = Field(min_length=1, description="Raw prompt text (no chat template); the target follows it.")
    target: str = Field(min_length=1, max_length=100, description="The target word X.")


class PressureRequest(Model):
    model: str
    items: list[PressureItem] = Field(min_length=1, max_length=1024)


class PressureSequence(Model):
    tokens: list[str]
    token_ids: list[int]
    prob: float = Field(description="Product of the teacher-forced token probabilities after the prompt.")


class PressureResult(Model):
    target: str
    p_sem: float = Field(description="min(1, sum of the sequences' probabilities).")
    p_sum: float = Field(description="The sum before clamping (the set nests prefixes, so it may pass 1).")
    p_first: float | None = Field(description="The probability of the single-token sequences' ids; None where no "
                                              "form of the target is a single token.")
    sequences: list[PressureSequence] = Field(description="S(X): the target's distinct token variants; empty when "
                                                          "no written form decodes back to X.")


class PressureResponse(Model):
    model: str
    results: list[PressureResult]
