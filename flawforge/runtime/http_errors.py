"""Errors become HTTP answers one way: the status and code their class carries, a short message, and never
more than an excerpt of what the client sent. A service may give its own body format to a path prefix
(the inference-server's OpenAI-compatible /v1 answers OpenAI's error object)."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Callable, Sequence

from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flawforge.errors import FlawforgeError
from flawforge.runtime.json_body import InvalidJsonBody, check_json_body

log = logging.getLogger(__name__)

MESSAGE_CHARS = 500  # of an error message (which may quote the input)
EXCERPT_CHARS = 120  # of a value the client sent, quoted back in a validation error
EXCERPT_ITEMS = 20  # values of a list or mapping quoted back whole; past that, an excerpt


@dataclass(frozen=True)
class ErrorAnswer:
    """What an error answer says; a format turns it into a body."""

    status: int
    code: str
    message: str
    param: str | None = None
    errors: list[dict] | None = None  # a validation error's findings, their inputs cut to excerpts

    def default_body(self) -> dict:
        if self.errors is not None:
            return {"detail": self.errors, "code": self.code}
        return {"detail": self.message, "code": self.code}


ErrorFormat = Callable[[ErrorAnswer], dict]


def cut(text: str, limit: int = MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _small(value: Any, budget: int) -> int:
    """What is left of `budget` (characters, roughly) after `value`; negative once over, without walking further."""
    if isinstance(value, str):
        return budget - len(value)
    if isinstance(value, (list, tuple)):
        if len(value) > EXCERPT_ITEMS:
            return -1
        for item in value:
            budget = _small(item, budget)
            if budget < 0:
                break
        return budget
    if isinstance(value, dict):
        if len(value) > EXCERPT_ITEMS:
            return -1
        for key, item in value.items():
            budget = _small(item, budget - len(str(key)))
            if budget < 0:
                break
        return budget
    if isinstance(value, float) and not math.isfinite(value):
        return -1  # JSON has no inf or nan: quoted as text
    if isinstance(value, (int, float, bool)) or value is None:
        return budget - 8
    return -1


def excerpt(value: Any) -> Any:
    """The value itself when small, else the start of its text: an error never echoes a large input back."""
    if _small(value, EXCERPT_CHARS) >= 0:
        return value
    if isinstance(value, str):
        return cut(value, EXCERPT_CHARS)
    if isinstance(value, (list, tuple, dict)):
        return f"<{type(value).__name__} of {len(value):,} items>"
    if isinstance(value, float):
        return repr(value)
    return f"<{type(value).__name__}>"


def validation_findings(errors: Sequence[dict]) -> list[dict]:
    """Pydantic's findings as FastAPI reports them (type, loc, msg, input, ctx), each input cut to an excerpt."""
    findings = []
    for error in errors[:EXCERPT_ITEMS]:
        finding = {"type": error.get("type"), "loc": list(error.get("loc", ())), "msg": cut(str(error.get("msg", "")))}
        if "input" in error:
            finding["input"] = excerpt(error["input"])
        if error.get("ctx"):
            finding["ctx"] = {key: excerpt(value if isinstance(value, (str, int, float, bool)) else str(value))
                              for key, value in error["ctx"].items()}
        findings.append(finding)
    return findings


class ErrorAnswers:
    """The app's exception handlers, and the body format of each path prefix."""

    def __init__(self, formats: Sequence[tuple[str, ErrorFormat]] = ()):
        # Longest prefix first: the most specific format wins.
        self.formats = sorted(formats, key=lambda entry: len(entry[0]), reverse=True)

    def format_for(self, path: str) -> ErrorFormat:
        for prefix, format_ in self.formats:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return format_
        return ErrorAnswer.default_body

    def response(self, path: str, answer: ErrorAnswer, headers: dict | None = None) -> JSONResponse:
        return JSONResponse(self.format_for(path)(answer), status_code=answer.status, headers=headers)

    def install(self, app: FastAPI) -> None:
        app.add_exception_handler(FlawforgeError, self.on_flawforge_error)
        app.add_exception_handler(RequestValidationError, self.on_invalid_request)
        app.add_exception_handler(HTTPException, self.on_http_exception)

    async def on_flawforge_error(self, request: Request, exc: FlawforgeError) -> JSONResponse:
        status = getattr(exc, "http_status", 500)
        if status >= 500:
            log.warning("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        answer = ErrorAnswer(status, exc.code, cut(str(exc)), param=getattr(exc, "param", None))
        # An error that says when to try again (a rate limit, a budget's window) says it as HTTP does.
        retry_after = getattr(exc, "retry_after_s", None)
        headers = {"Retry-After": str(max(1, math.ceil(retry_after)))} if retry_after is not None else None
        return self.response(request.url.path, answer, headers=headers)

    async def on_invalid_request(self, request: Request, exc: RequestValidationError) -> JSONResponse:
        findings = validation_findings(exc.errors())
        first = findings[0] if findings else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(part) for part in first["loc"][1:]) or "body"
        # A format may answer a malformed body with its API's own status (OpenAI's is 400).
        status = getattr(self.format_for(request.url.path), "invalid_request_status", 422)
        answer = ErrorAnswer(status, "invalid_request", f"{where}: {first['msg']}",
                             param=where, errors=findings)
        return self.response(request.url.path, answer)


    async def on_http_exception(self, request: Request, exc: HTTPException) -> JSONResponse:
        """The router's own answers (no such path, method not allowed) in the prefix's format, as OpenAI words
        them: an unknown URL names the method and path."""
        phrase = HTTPStatus(exc.status_code).phrase
        message = str(exc.detail) if exc.detail != phrase else phrase
        if exc.status_code in (404, 405) and exc.detail == phrase:
            message = f"Invalid URL ({request.method} {cut(request.url.path, EXCERPT_CHARS)})"
        code = phrase.lower().replace(" ", "_")
        return self.response(request.url.path, ErrorAnswer(exc.status_code, code, cut(message)), headers=exc.headers)


class BodyLimitMiddleware:
    """Refuses a request body over `max_bytes` with a 413, before it is read whole: at once when its
    Content-Length says so, else as soon as the bytes streamed in pass the limit."""

    def __init__(self, app: ASGIApp, max_bytes: int, answers: ErrorAnswers):
        self.app = app
        self.max_bytes = max_bytes
        self.answers = answers

    def refusal(self, scope: Scope) -> JSONResponse:
        answer = ErrorAnswer(413, "body_too_large", f"request body over {self.max_bytes:,} bytes "
                                                    "(FLAWFORGE_MAX_REQUEST_BYTES)")
        return self.answers.response(scope["path"], answer, headers={"Connection": "close"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self.refusal(scope)(scope, receive, send)
            return
        received = 0
        refused = started = False

        async def limited_receive() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    refused = True
                    if not started:
                        await self.refusal(scope)(scope, receive, guarded_send(send, force=True))
                    # The app sees the client gone and stops reading; what it answers is dropped.
                    return {"type": "http.disconnect"}
            return message

        def guarded_send(inner: Send, force: bool = False) -> Send:
            async def send_once(message: Message) -> None:
                nonlocal started
                if refused and not force:
                    return
                if message["type"] == "http.response.start":
                    started = True
                await inner(message)
            return send_once

        await self.app(scope, limited_receive, guarded_send(send))


def is_json(content_type: str | None) -> bool:
    """Whether FastAPI reads a body of this type as JSON (no type at all included)."""
    if not content_type:
        return True
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class JsonBodyCheck:
    """Reads a JSON request body whole (BodyLimitMiddleware, outside it, bounds it) and refuses one that holds
    what no route takes (flawforge.runtime.json_body) with a 422 before any route parses it; else hands the
    same bytes on. The check runs on a worker thread: a large body does not hold up other requests."""

    def __init__(self, app: ASGIApp, answers: ErrorAnswers):
        self.app = app
        self.answers = answers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_json(Headers(scope=scope).get("content-type")):
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away (or the body limit refused it and answered)
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body:
            try:
                await to_thread.run_sync(check_json_body, body)
            except InvalidJsonBody as exc:
                answer = ErrorAnswer(exc.http_status, exc.code, cut(f"JSON body: {exc}"))
                await self.answers.response(scope["path"], answer)(scope, receive, send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
