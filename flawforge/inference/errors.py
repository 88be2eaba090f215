"""The one error a request to the inference-server can end in, shaped like OpenAI's."""
from __future__ import annotations

from flawforge.errors import FlawforgeError


def openai_error(status: int, message: str, param: str | None, code: str | None) -> dict:
    """OpenAI's error object."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


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
