"""The one error a request to the inference-server can end in, shaped like OpenAI's."""
from __future__ import annotations

from typing import TYPE_CHECKING

from flawforge.errors import FlawforgeError

if TYPE_CHECKING:
    from flawforge.runtime.http_errors import ErrorAnswer


def openai_error(status: int, message: str, param: str | None, code: str | None) -> dict:
    """OpenAI's error object."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class OpenAIErrorFormat:
    """OpenAI's error object for every error of an OpenAI-compatible API (the inference-server's and the
    llm-gateway's /v1); a body that does not validate is a 400 there, as OpenAI answers it, not FastAPI's 422."""

    invalid_request_status = 400

    def __call__(self, answer: ErrorAnswer) -> dict:
        return openai_error(answer.status, answer.message, answer.param, answer.code)


openai_error_body = OpenAIErrorFormat()


class RequestError(FlawforgeError):
    """A request that cannot be served: the HTTP status, the field at fault and a stable code."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.http_status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict:
        return openai_error(self.http_status, self.message, self.param, self.code)


class UnsupportedSchemaKeyword(RequestError):
    """A JSON-schema keyword constrained decoding would not enforce (flawforge.inference.schema_support): refused,
    never silently dropped."""

    def __init__(self, param: str, where: str, keyword: str, pointer: str, reason: str):
        super().__init__(400, f"The schema of {where} uses {keyword!r} at {pointer}, which this server does not "
                              f"enforce while decoding: {reason}.", param=param, code="unsupported_schema_keyword")
        self.keyword = keyword


class UpstreamUnavailable(RequestError):
    """vLLM's server, which generates for this one, could not be reached."""

    def __init__(self, base_url: str, cause: Exception):
        super().__init__(503, f"The generation server at {base_url} could not be reached: {type(cause).__name__}: "
                              f"{cause}", code="upstream_unavailable")
