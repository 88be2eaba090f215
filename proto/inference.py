"""The inference-server's API: OpenAI-compatible chat, completions, models, files and batches,
plus the research endpoints (score, trace, logit lens, patch)."""
from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import Field, model_validator

from flawforge.proto.base import BlobRef, Message, Model

# --- OpenAI-compatible requests -----------------------------------------------------------------


class TextPart(Model):
    type: Literal["text"]
    text: str


class ChatMessage(Model):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ResponseFormat(Model):
    # json_object: the server checks that every choice parses as JSON and answers an error otherwise.
    type: Literal["text", "json_object"]


class SamplingRequest(Model):
    """Fields the chat and text completion requests share."""

    model: str
    n: int = Field(1, ge=1, le=16, description="Completions to sample for the prompt.")
    seed: int | None = Field(None, description="Same seed and request: same output. None: a random seed.")
    temperature: float = Field(1.0, ge=0, le=2, description="0 is greedy decoding.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling: keep the most likely tokens up to this mass.")
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = Field(None, description="Up to 4 strings that end a completion (not included).")
    stream: Literal[False] = Field(False, description="Streaming is not supported.")
    user: str | None = None

    @model_validator(mode="after")
    def _check_stop(self):
        if isinstance(self.stop, list) and (len(self.stop) > 4 or not all(self.stop)):
            raise ValueError("stop takes at most 4 non-empty strings")
        if self.stop == "":
            raise ValueError("stop must not be empty")
        return self

    @property
    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="Newer name of max_tokens; wins over it.")
    logprobs: bool = Field(False, description="Return the log-probability of each sampled token (of the unscaled "
                                              "model distribution).")
    top_logprobs: int | None = Field(None, ge=0, le=20, description="Alternatives per token; needs logprobs.")
    response_format: ResponseFormat | None = None

    @model_validator(mode="after")
    def _check_logprobs(self):
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs set to true")
        return self


class CompletionRequest(SamplingRequest):
    prompt: str | list[str] = Field(description="One prompt or several; choices come n per prompt, in order.")
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=5, description="Return the sampled token's log-probability and this "
                                                              "many alternatives per token.")

    @model_validator(mode="after")
    def _check_prompt(self):
        if isinstance(self.prompt, list) and not self.prompt:
            raise ValueError("prompt must hold at least one string")
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
    bytes: list[int]


class TokenLogprob(Model):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Model):
    content: list[TokenLogprob]


class AssistantMessage(Model):
    role: Literal["assistant"] = "assistant"
    content: str


FinishReason = Literal["stop", "length"]


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


class CompletionLogprobs(Model):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(Model):
    index: int
    text: str
    finish_reason: FinishReason
    logprobs: CompletionLogprobs | None = None


class Completion(Model):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
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
    metadata: dict[str, str] | None = None


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
    full_sequence: bool = Field(False, description="Store every position, not only the last token's.")


class TraceResult(Model):
    blob: BlobRef = Field(description="torch.save of a dict: input_ids, positions, hidden_states "
                                      "[layers+1, positions, hidden] (0: embeddings, l: residual stream after "
                                      "block l, before the final norm), attentions [layers, heads, positions, "
                                      "keys], next_token_id, next_token_prob.")
    tokens: list[str]
    positions: list[int]
    next_token: str
    next_token_id: int
    next_token_prob: float
    num_layers: int


class TraceResponse(Model):
    model: str
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
    p_first: float = Field(description="The probability of the single-token sequences' ids (of the sequences' "
                                       "distinct first ids where no sequence is a single token).")
    sequences: list[PressureSequence] = Field(description="S(X): the target's distinct token variants; empty when "
                                                          "no written form decodes back to X.")


class PressureResponse(Model):
    model: str
    results: list[PressureResult]
