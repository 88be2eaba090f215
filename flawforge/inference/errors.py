"""The one error a request to the inference-server can end in, shaped like OpenAI's."""
from __future__ import annotations

from flawforge.errors import FlawforgeError


class RequestError(FlawforgeError):
    """A request that cannot be served: the HTTP status, the field at fault and a stable code."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    @property
    def type(self) -> str:
        return "invalid_request_error" if self.status < 500 else "server_error"

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
