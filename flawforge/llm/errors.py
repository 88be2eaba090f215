"""What can go wrong with a model call. Each error has a stable `code`, used per request in batches, and the
HTTP status the gateway answers it with (a provider's failure is a 502 unless a class says otherwise)."""
from __future__ import annotations

from flawforge.errors import FlawforgeError


class LLMError(FlawforgeError):
    http_status = 502
    code = "llm_error"
    retryable = False  # whether trying the same request again may succeed


class UnknownModel(LLMError):
    http_status = 404
    code = "unknown_model"


class ContextLengthExceeded(LLMError):
    http_status = 400
    code = "context_length_exceeded"


class InvalidRequest(LLMError):
    http_status = 400
    code = "invalid_request"


class InvalidModelOutput(LLMError):
    """The reply does not parse or does not match the requested schema, after every repair."""

    http_status = 422
    code = "invalid_output"


class BudgetExceeded(LLMError):
    """A job's or a caller's allowance is spent; `retry_after_s`: when a caller's window renews (a job's
    budget does not)."""

    http_status = 429
    code = "budget_exceeded"

    def __init__(self, message: str, *, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RateLimited(LLMError):
    """A provider's requests or tokens per minute, shared by every replica, would be passed by this call."""

    http_status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LimitsUnavailable(LLMError):
    """The Redis the limits and budgets are kept in cannot be reached: the call is refused, not let through
    unlimited."""

    http_status = 503
    code = "limits_unavailable"


class CallCancelled(LLMError):
    http_status = 409
    code = "cancelled"


class ReplayMiss(LLMError):
    """Replay mode answers only from the cache and this request is not in it."""

    http_status = 404
    code = "replay_miss"


class CallLogUnavailable(LLMError):
    """The request/response log could not be written, so the call is refused."""

    http_status = 503
    code = "log_unavailable"


class MalformedBatchLine(LLMError):
    http_status = 400
    code = "malformed_batch_line"


class ProviderError(LLMError):
    code = "provider_error"

    def __init__(self, message: str, *, retryable: bool = False, retry_after_s: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class BatchNotFound(LLMError):
    http_status = 404
    code = "batch_not_found"
