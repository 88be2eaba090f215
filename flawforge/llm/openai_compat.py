"""An OpenAI-compatible endpoint over httpx: chat completions, files and the Batch API.

Every exchange goes through `call`, which rate-limits, logs the request before sending it,
logs the response, and retries what may succeed on a second try.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import httpx

from flawforge.llm.calllog import CallLog
from flawforge.llm.config import ProviderConfig
from flawforge.llm.errors import (ContextLengthExceeded, InvalidRequest, LLMError, ProviderError,
                                  UnknownModel)
from flawforge.llm.limits import Backoff, CallScope, RateLimiter
from flawforge.proto.inference import Usage
from flawforge.proto.llm import ChatRequest, ChatResult

CHAT_PATH = "/chat/completions"


def error_from_response(status: int, body: Any, retry_after_s: float | None = None, provider: str = "") -> LLMError:
    """Names what the provider (by its name, where given) refused, from its status code and OpenAI-style error
    body."""
    code, message = "", ""
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body))
        if isinstance(error, dict):
            code = str(error.get("code") or error.get("type") or "")
            message = str(error.get("message") or error.get("msg") or json.dumps(error))
        else:
            message = json.dumps(error) if not isinstance(error, str) else error
    elif body:
        message = str(body)[:1000]
    lowered = f"{code} {message}".lower()
    detail = f"provider{f' {provider!r}' if provider else ''} answered {status}: {message or '(no message)'}"
    if code == "context_length_exceeded" or ("context" in lowered and ("length" in lowered or "maximum" in lowered)):
        return ContextLengthExceeded(detail)
    if code == "model_not_found" or (status == 404 and "model" in lowered):
        return UnknownModel(detail)
    if status in (408, 409, 429) or status >= 500:
        return ProviderError(detail, retryable=True, retry_after_s=retry_after_s)
    if status in (400, 413, 422):
        return InvalidRequest(detail)
    return ProviderError(detail)


def result_from_completion(body: Any, fp: str, provider: str) -> ChatResult:
    try:
        choice = body["choices"][0]
        usage = body.get("usage") or {}
        return ChatResult(fingerprint=fp, provider=provider, model=str(body.get("model", "")),
                          content=choice["message"].get("content") or "", finish_reason=choice.get("finish_reason"),
                          usage=Usage(prompt_tokens=usage.get("prompt_tokens", 0),
                                      completion_tokens=usage.get("completion_tokens", 0),
                                      total_tokens=usage.get("total_tokens", 0)))
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ProviderError(f"provider returned a chat completion without {exc}: {str(body)[:300]}") from None


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def _decoded(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


class OpenAICompatibleProvider:
    def __init__(self, config: ProviderConfig, calllog: CallLog, backoff: Backoff):
        self.config = config
        self.name = config.name
        self.calllog = calllog
        self.backoff = backoff
        self.limiter = RateLimiter(config.requests_per_minute, config.max_concurrency)
        self._models: list[str] | None = list(config.models) or None
        self._http: httpx.Client | None = None
        self._http_lock = threading.Lock()

    @property
    def http(self) -> httpx.Client:
        """Made with the first request: its TLS set-up takes a fifth of a second, and every service of a
        stack starts the gateway's providers, whether or not a job ever calls them."""
        with self._http_lock:
            if self._http is None:
                self._http = httpx.Client(base_url=self.config.base_url.rstrip("/"), timeout=self.config.timeout_s)
            return self._http

    def close(self) -> None:
        with self._http_lock:
            if self._http is not None:
                self._http.close()

    @property
    def secrets(self) -> list[str]:
        """What the call log and the cache must never hold: this provider's API key."""
        secret = self._secret()
        return [secret] if secret else []

    def _secret(self) -> str | None:
        return os.environ.get(self.config.api_key_env) if self.config.api_key_env else None

    def call(self, method: str, path: str, scope: CallScope, *, json_body: Any = None,
             files: dict | None = None, data: dict | None = None) -> httpx.Response:
        """One logical request, retried with backoff while the failure is transient."""
        secret = self._secret()
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        secrets = [secret] if secret else []
        logged_body = json_body if files is None else {"form": data, "files": {
            name: {"filename": f[0], "content": f[1].decode(errors="replace")} for name, f in files.items()}}
        attempt = 0
        while True:
            attempt += 1
            scope.check()
            self.limiter.acquire(scope.check)
            key = self.calllog.exchange_key()
            try:
                self.calllog.write(f"{key}.request.json", {
                    "provider": self.name, "job_id": scope.job_id, "attempt": attempt, "method": method,
                    "url": str(self.http.build_request(method, path).url), "headers": headers, "body": logged_body}, secrets)
                started = time.monotonic()
                try:
                    response = self.http.request(method, path, json=json_body, files=files, data=data,
                                                 headers=headers)
                except httpx.HTTPError as exc:
                    self.calllog.write(f"{key}.response.json", {
                        "provider": self.name, "error": f"{type(exc).__name__}: {exc}",
                        "latency_s": time.monotonic() - started}, secrets)
                    error: LLMError = ProviderError(f"cannot reach provider {self.name!r} at "
                                                    f"{self.http.base_url}: {type(exc).__name__}: {exc}",
                                                    retryable=True)
                else:
                    self.calllog.write(f"{key}.response.json", {
                        "provider": self.name, "status": response.status_code, "body": _decoded(response),
                        "latency_s": time.monotonic() - started}, secrets)
                    if response.is_success:
                        return response
                    error = error_from_response(response.status_code, _decoded(response), _retry_after(response),
                                                self.name)
            finally:
                self.limiter.release()
            if not error.retryable or attempt == self.backoff.max_attempts:
                raise error
            time.sleep(self.backoff.delay(attempt, getattr(error, "retry_after_s", None)))

    # --- models -------------------------------------------------------------------------
    def models(self, scope: CallScope) -> list[str]:
        """The configured models, or those the provider lists (asked once)."""
        if self._models is None:
            body = self.call("GET", "/models", scope).json()
            self._models = [str(m["id"]) for m in body.get("data", [])]
        return self._models

    # --- chat ---------------------------------------------------------------------------
    def chat_body(self, request: ChatRequest, upstream_model: str) -> dict:
        messages = [m.model_dump() for m in request.messages]
        body: dict[str, Any] = {"model": upstream_model, "messages": messages, **request.parameters()}
        if request.response_schema is not None:
            if self.config.json_schema:
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": "reply", "schema": request.response_schema}}
            else:
                # Stated up front with the other instructions: a schema as the last message tempts small
                # models to echo it instead of answering.
                note = ("Reply with one JSON object, and nothing else, that matches this JSON schema:\n"
                        + json.dumps(request.response_schema))
                if messages[0]["role"] == "system":
                    messages[0]["content"] += "\n\n" + note
                else:
                    messages.insert(0, {"role": "system", "content": note})
        return body

    def chat(self, request: ChatRequest, upstream_model: str, fp: str, scope: CallScope) -> ChatResult:
        response = self.call("POST", CHAT_PATH, scope, json_body=self.chat_body(request, upstream_model))
        return result_from_completion(_decoded(response), fp, self.name)

    # --- files and batches ----------------------------------------------------------------
    def upload_batch_file(self, jsonl: bytes, scope: CallScope) -> str:
        response = self.call("POST", "/files", scope, files={"file": ("batch.jsonl", jsonl, "application/jsonl")},
                             data={"purpose": "batch"})
        return str(response.json()["id"])

    def create_batch(self, input_file_id: str, scope: CallScope) -> dict:
        return self.call("POST", "/batches", scope, json_body={
            "input_file_id": input_file_id, "endpoint": "/v1" + CHAT_PATH, "completion_window": "24h"}).json()

    def get_batch(self, batch_id: str, scope: CallScope) -> dict:
        return self.call("GET", f"/batches/{batch_id}", scope).json()

    def cancel_batch(self, batch_id: str, scope: CallScope) -> dict:
        return self.call("POST", f"/batches/{batch_id}/cancel", scope).json()

    def file_content(self, file_id: str, scope: CallScope) -> bytes:
        return self.call("GET", f"/files/{file_id}/content", scope).content
