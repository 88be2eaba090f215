"""Model providers through LiteLLM: one Router over every configured provider (retries, fallbacks, cooldowns),
every exchange written to the call log before it is sent and after it ends, each failure named as one of the
gateway's errors, and the Batch API's files and batches through LiteLLM's batch functions.

LiteLLM is imported by the first call, not with the gateway: importing it takes seconds of CPU, and every
service that holds a gateway would pay for it whether or not a job ever calls a model.
"""
from __future__ import annotations

import os
import re
import threading
import time
from contextvars import ContextVar
from functools import cached_property
from typing import Any, Callable, Iterator

from flawforge.llm.calllog import CallLog
from flawforge.llm.errors import ContextLengthExceeded, LLMError, ProviderError
from flawforge.llm.limits import CallScope, ProviderRate, SharedCounters
from flawforge.llm.openai_compat import CHAT_PATH, chat_body, error_from_response, result_from_completion
from flawforge.proto.inference import Usage
from flawforge.proto.llm import ChatRequest, ChatResult, ProviderConfig

# The inference-server's decoding extensions: LiteLLM refuses parameters it does not know, so they travel in
# the body as they are (extra_body).
EXTENSIONS = ("json_closing_reserve", "dry_multiplier", "dry_allowed_length", "dry_sequence_breakers")

LITELLM_NOISE = re.compile(r"^litellm\.\w+: (\w+: )?(\w+Exception - )?")
# The attempts of the exchange running in this context (LiteLLM reports each retry and fallback to a callback).
_attempts: ContextVar[list[dict] | None] = ContextVar("flawforge_llm_attempts", default=None)
_import_lock = threading.Lock()


def litellm():
    """LiteLLM, set up once: its price list from the package (it would fetch one from the internet at import),
    no debug banners, and the callback that records each attempt of an exchange."""
    with _import_lock:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm as module
        from litellm.integrations.custom_logger import CustomLogger

        if not any(type(callback).__name__ == "AttemptRecorder" for callback in module.callbacks):
            class AttemptRecorder(CustomLogger):
                """Each attempt (a retry, a fallback) of the exchange running in the caller's context: where it
                went and how it failed."""

                def log_pre_api_call(self, model, messages, kwargs):
                    attempts = _attempts.get()
                    if attempts is not None:
                        metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
                        extra = kwargs.get("additional_args") or {}
                        attempts.append({"model": metadata.get("model_group"), "url": str(extra.get("api_base")),
                                         "headers": extra.get("headers") or {}})

                def log_failure_event(self, kwargs, response_obj, start_time, end_time):
                    attempts = _attempts.get()
                    if attempts:
                        attempts[-1]["error"] = str(kwargs.get("exception"))[:1000]

            module.suppress_debug_info = True
            module.callbacks.append(AttemptRecorder())
        return module


def _caused_by_transport(exc: BaseException) -> bool:
    import httpx

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def gateway_error(exc: Exception, provider: "Provider") -> LLMError:
    """LiteLLM's exception as the gateway's error, naming the provider."""
    if isinstance(exc, LLMError):
        return exc
    # "litellm.InternalServerError: InternalServerError: OpenAIException - boom\n\nLiteLLM: model group...": boom
    message = LITELLM_NOISE.sub("", str(getattr(exc, "message", exc)).split("\n\nLiteLLM", 1)[0])
    if _caused_by_transport(exc):
        return ProviderError(f"cannot reach provider {provider.name!r} at {provider.config.base_url or 'its API'}: "
                             f"{message}", retryable=True)
    if isinstance(exc, litellm().ContextWindowExceededError):
        return ContextLengthExceeded(f"provider {provider.name!r}: {message}")
    return error_from_response(int(getattr(exc, "status_code", None) or 502), message,
                               retry_after_of(getattr(exc, "response", None)), provider.name)


def retry_after_of(response: Any) -> float | None:
    """The seconds a response's Retry-After header asks for; None without one that is a number."""
    try:
        return float(response.headers["retry-after"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


class Provider:
    """One configured provider: its LiteLLM deployment, its limits, its models and its Batch API."""

    def __init__(self, config: ProviderConfig, calllog: CallLog, rate: ProviderRate):
        self.config = config
        self.name = config.name
        self.calllog = calllog
        self.rate = rate
        self._models: list[str] | None = list(config.models) or None
        self._models_lock = threading.Lock()

    @property
    def secrets(self) -> list[str]:
        """What the call log and the cache must never hold: this provider's API key."""
        secret = os.environ.get(self.config.api_key_env) if self.config.api_key_env else None
        return [secret] if secret else []

    def credentials(self, key: str | None = None) -> dict[str, Any]:
        """LiteLLM's parameters reaching this provider: where, with which key (`key`, else the key's value now),
        and the provider's own settings."""
        params: dict[str, Any] = {"custom_llm_provider": self.config.litellm_provider, **self.config.litellm_params}
        if self.config.base_url:
            params["api_base"] = self.config.base_url
        if self.config.api_key_env:
            params["api_key"] = key or os.environ.get(self.config.api_key_env)
        elif self.config.base_url and self.config.openai_compatible:
            params["api_key"] = "none"  # a server without keys; OpenAI's client refuses to send no key at all
        return params

    def deployment(self) -> dict:
        """Every model of this provider, as one wildcard deployment of LiteLLM's Router: 'name/<model>'. The
        Router reads the key from the environment at each call, so a rotated key is used at once."""
        key = f"os.environ/{self.config.api_key_env}" if self.config.api_key_env else None
        params = {k: v for k, v in self.credentials(key).items() if k != "custom_llm_provider"}
        # The Router retries; a provider client's own retries (OpenAI's: 2) would multiply them.
        return {"model_name": f"{self.name}/*", "litellm_params": {
            "model": f"{self.config.litellm_provider}/*", "timeout": self.config.timeout_s, "max_retries": 0, **params}}

    def models(self) -> list[str]:
        """The configured models, or those an OpenAI-compatible provider lists (asked once)."""
        with self._models_lock:
            if self._models is None:
                import openai  # LiteLLM's own client of OpenAI-compatible APIs

                client = openai.OpenAI(api_key=(self.secrets or ["none"])[0], base_url=self.config.base_url,
                                       timeout=self.config.timeout_s, max_retries=0)
                try:
                    self._models = [model.id for model in client.models.list()]
                except openai.OpenAIError as exc:
                    raise gateway_error(exc, self) from None
            return self._models

    def chat_body(self, request: ChatRequest, upstream_model: str) -> dict:
        return chat_body(request, upstream_model, self.config.json_schema)

    def post(self, path: str, body: dict, scope: CallScope, attempts: int = 1) -> Any:
        """The JSON answer of a route of the provider's own beside OpenAI's API (`path` under its base_url: the
        inference-server's research routes), under this provider's limits and logged like a model call; a
        failure that may pass (unreachable, 429, 5xx) is tried again, up to `attempts` in all, each logged."""
        import httpx

        if not self.config.base_url:
            raise ProviderError(f"provider {self.name!r} has no base_url to send {path} to")
        url = self.config.base_url.rstrip("/") + path
        headers = {"Authorization": f"Bearer {self.secrets[0]}"} if self.secrets else {}

        def send() -> Any:
            response = httpx.post(url, json=body, headers=headers, timeout=self.config.timeout_s)
            if not response.is_success:
                try:
                    detail = response.json()
                except ValueError:
                    detail = response.text[:1000]
                raise error_from_response(response.status_code, detail, retry_after_of(response), self.name)
            return response.json()

        attempt = 1
        while True:
            try:
                with self.rate.admitted(scope.check):
                    return logged_exchange(self.calllog, {"provider": self.name, "job_id": scope.job_id, "url": url,
                                                          "attempt": attempt, "body": body}, self.secrets, send,
                                           self)[1]
            except LLMError as exc:
                if not exc.retryable or attempt >= attempts:
                    raise
                time.sleep(min(30.0, getattr(exc, "retry_after_s", None) or 0.5 * 2 ** (attempt - 1)))
            attempt += 1

    # --- files and batches ----------------------------------------------------------------
    def _batch_call(self, what: str, scope: CallScope, record: dict, call: Callable[..., Any]) -> Any:
        return logged_exchange(self.calllog, {"provider": self.name, "job_id": scope.job_id, "call": what, **record},
                               self.secrets, lambda: call(**self.credentials()), self)[1]

    def upload_batch_file(self, jsonl: bytes, scope: CallScope) -> str:
        created = self._batch_call("create_file", scope, {"body": jsonl.decode(errors="replace")},
                                   lambda **kw: litellm().create_file(file=("batch.jsonl", jsonl, "application/jsonl"),
                                                                      purpose="batch", **kw))
        return str(created.id)

    def create_batch(self, input_file_id: str, scope: CallScope) -> dict:
        return self._batch_call("create_batch", scope, {"input_file_id": input_file_id}, lambda **kw: litellm(
        ).create_batch(input_file_id=input_file_id, endpoint="/v1" + CHAT_PATH, completion_window="24h",
                       **kw)).model_dump()

    def get_batch(self, batch_id: str, scope: CallScope) -> dict:
        return self._batch_call("retrieve_batch", scope, {"batch_id": batch_id},
                                lambda **kw: litellm().retrieve_batch(batch_id=batch_id, **kw)).model_dump()

    def cancel_batch(self, batch_id: str, scope: CallScope) -> dict:
        return self._batch_call("cancel_batch", scope, {"batch_id": batch_id},
                                lambda **kw: litellm().cancel_batch(batch_id=batch_id, **kw)).model_dump()

    def file_content(self, file_id: str, scope: CallScope) -> bytes:
        return self._batch_call("file_content", scope, {"file_id": file_id},
                                lambda **kw: litellm().file_content(file_id=file_id, **kw)).content


def _loggable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, (dict, list, str, int, float, bool, type(None))) else repr(value)


def logged_exchange(calllog: CallLog, record: dict, secrets: list[str], call: Callable[[], Any],
                    provider: Provider, *, streamed: bool = False) -> tuple[str, Any]:
    """Runs `call` with its request logged before (a log that cannot be written refuses the call) and its
    response or failure after, every attempt LiteLLM made included: (the exchange's log key, the response). A
    stream's response is logged by its reader, at its end."""
    key = calllog.exchange_key()
    calllog.write(f"{key}.request.json", record, secrets)
    attempts: list[dict] = []
    token = _attempts.set(attempts)
    started = time.monotonic()
    try:
        response = call()
    except Exception as exc:
        error = gateway_error(exc, provider)
        calllog.write(f"{key}.response.json", {"provider": provider.name, "error": f"{error.code}: {error}",
                                               "attempts": attempts, "latency_s": time.monotonic() - started},
                      secrets)
        raise error from None
    finally:
        _attempts.reset(token)
    if not streamed:
        calllog.write(f"{key}.response.json", {"provider": provider.name, "status": 200,
                                               "body": _loggable(response), "attempts": attempts,
                                               "latency_s": time.monotonic() - started}, secrets)
    return key, response


class ProviderRouter:
    """LiteLLM's Router over every provider: each model call is retried on the provider, then handed to the
    provider's fallbacks in turn; a provider that keeps failing is cooled down."""

    def __init__(self, providers: dict[str, Provider], calllog: CallLog, max_attempts: int, cooldown_s: float):
        self.providers = providers
        self.calllog = calllog
        self.max_attempts = max_attempts
        self.cooldown_s = cooldown_s

    @cached_property
    def router(self):
        return litellm().Router(model_list=[provider.deployment() for provider in self.providers.values()],
                                num_retries=self.max_attempts - 1, retry_after=0, cooldown_time=self.cooldown_s)

    @property
    def secrets(self) -> list[str]:
        return [secret for provider in self.providers.values() for secret in provider.secrets]

    def _answering(self, response: Any, asked: Provider) -> Provider:
        """The provider whose model group answered (a fallback's, perhaps)."""
        headers = (getattr(response, "_hidden_params", None) or {}).get("additional_headers") or {}
        group = str(headers.get("x-litellm-model-group") or "")
        return self.providers.get(group.split("/", 1)[0], asked)

    def _completion(self, provider: Provider, request: ChatRequest, upstream: str, scope: CallScope,
                    stream: bool) -> tuple[str, Any]:
        """The Router's call, logged: (its log key, the answer or the stream of chunks)."""
        body = provider.chat_body(request, upstream)
        group = f"{provider.name}/{body.pop('model')}"
        extensions = {name: body.pop(name) for name in EXTENSIONS if name in body}
        record = {"provider": provider.name, "job_id": scope.job_id, "url": provider.config.base_url,
                  "model": group, "fallbacks": provider.config.fallbacks, "stream": stream,
                  "body": {"model": group, **body, **extensions}}
        kwargs = {**body, "extra_body": extensions} if extensions else body
        if stream:
            kwargs = {**kwargs, "stream": True, "stream_options": {"include_usage": True}}
        return logged_exchange(self.calllog, record, self.secrets, lambda: self.router.completion(
            model=group, fallbacks=provider.config.fallbacks or None, **kwargs), provider, streamed=stream)

    def chat(self, provider: Provider, request: ChatRequest, upstream: str, fp: str, scope: CallScope) -> ChatResult:
        with provider.rate.admitted(scope.check):
            _, response = self._completion(provider, request, upstream, scope, stream=False)
        answering = self._answering(response, provider)
        result = result_from_completion(response.model_dump(), fp, answering.name)
        answering.rate.spend_tokens(result.usage.total_tokens)
        return result

    def stream(self, provider: Provider, request: ChatRequest, upstream: str, fp: str,
               scope: CallScope) -> Iterator[str | ChatResult]:
        """The reply's text as the provider streams it, then the whole reply as a ChatResult; the exchange's
        response is logged at the stream's end."""
        with provider.rate.admitted(scope.check):
            started = time.monotonic()
            key, chunks = self._completion(provider, request, upstream, scope, stream=True)
            answering = self._answering(chunks, provider)
            parts: list[str] = []
            finish_reason, usage, model = None, Usage(), upstream
            try:
                for chunk in chunks:
                    model = getattr(chunk, "model", None) or model
                    if getattr(chunk, "usage", None):
                        usage = Usage(prompt_tokens=chunk.usage.prompt_tokens or 0,
                                      completion_tokens=chunk.usage.completion_tokens or 0,
                                      total_tokens=chunk.usage.total_tokens or 0)
                    for choice in chunk.choices or []:
                        finish_reason = choice.finish_reason or finish_reason
                        if choice.delta and choice.delta.content:
                            parts.append(choice.delta.content)
                            yield choice.delta.content
            except Exception as exc:
                error = gateway_error(exc, answering)
                self.calllog.write(f"{key}.response.json", {
                    "provider": answering.name, "error": f"{error.code}: {error}", "partial": "".join(parts),
                    "latency_s": time.monotonic() - started}, self.secrets)
                raise error from None
        result = ChatResult(fingerprint=fp, provider=answering.name, model=model, content="".join(parts),
                            finish_reason=finish_reason, usage=usage)
        self.calllog.write(f"{key}.response.json", {"provider": answering.name, "status": 200, "stream": True,
                                                    "body": result.model_dump(mode="json"),
                                                    "latency_s": time.monotonic() - started}, self.secrets)
        answering.rate.spend_tokens(usage.total_tokens)
        yield result


def make_providers(configs: dict[str, ProviderConfig], calllog: CallLog, counters: SharedCounters,
                   rate_wait_s: float) -> dict[str, Provider]:
    return {name: Provider(config, calllog, ProviderRate(config, counters, rate_wait_s))
            for name, config in configs.items()}
