"""What can go wrong with a model call. Each error has a stable `code`, used per request in batches."""
from __future__ import annotations

from flawforge.errors import FlawforgeError


class LLMError(FlawforgeError):
    code = "llm_error"
    retryable = False  # whether trying the same request again may succeed


class UnknownModel(LLMError):
    code = "unknown_model"


class ContextLengthExceeded(LLMError):
    code = "context_length_exceeded"


class InvalidRequest(LLMError):
    code = "invalid_request"


class InvalidModelOutput(LLMError):
    """The reply does not parse or does not match the requested schema, after every repair."""

    code = "invalid_output"


class BudgetExceeded(LLMError):
    code = "budget_exceeded"


class CallCancelled(LLMError):
    code = "cancelled"


class ReplayMiss(LLMError):
    """Replay mode answers only from the cache and this request is not in it."""

    code = "replay_miss"


class CallLogUnavailable(LLMError):
    """The request/response log could not be written, so the call is refused."""

    code = "log_unavailable"


class MalformedBatchLine(LLMError):
    code = "malformed_batch_line"


class ProviderError(LLMError):
    code = "provider_error"

    def __init__(self, message: str, *, retryable: bool = False, retry_after_s: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class BatchNotFound(LLMError):
    code = "batch_not_found"
