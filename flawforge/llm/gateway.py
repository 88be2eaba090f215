"""The one door for model calls: cache, replay, budgets and cancellation in front of the providers."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterator, Literal, TypeVar

from pydantic import BaseModel

from flawforge.blobstore import BlobStore
from flawforge.llm.batches import BatchManager, error_of, kept_reason
from flawforge.llm.cache import ResponseCache, fingerprint
from flawforge.llm.calllog import CallLog
from flawforge.llm.config import ProviderConfig, load_providers
from flawforge.llm.errors import InvalidModelOutput, InvalidRequest, LLMError, ReplayMiss, UnknownModel
from flawforge.llm.limits import CallerBudget, CallScope, SharedCounters
from flawforge.llm.providers import Provider, ProviderRouter, make_providers
from flawforge.llm.structured import parse_reply, repair_request
from flawforge.proto.llm import BatchRow, ChatRequest, ChatResult
from flawforge.runtime.metrics import MODEL_REQUESTS, MODEL_SECONDS, MODEL_TOKENS
from flawforge.settings import Settings

T = TypeVar("T", bound=BaseModel)


@dataclass
class StructuredOutcome(Generic[T]):
    """A parsed value or the error that prevented it, with every reply it took (the first, then repairs)."""

    value: T | None = None
    error: LLMError | None = None
    replies: list[ChatResult] = field(default_factory=list)
    loop_retried: bool = False  # a reply cut at max_tokens was asked for again with a penalty (not a repair)

    @property
    def repairs(self) -> int:
        return max(0, len(self.replies) - 1 - self.loop_retried)


# A provider with the loop guard decodes every schema-enforced request with the repetition guard (no
# sequence breakers: in JSON text every line break and quote is escaped, so the default breakers would cut
# every run short; 12 tokens clears the schema's own repeated keys) and the last 128 tokens reserved to close
# the JSON, so a small model's greedy loop is broken as it starts instead of filling max_tokens, and a reply
# cut at max_tokens still parses. A reply cut under an enforced schema by another provider is asked for once
# more with a frequency penalty.
LOOP_GUARD = {"dry_multiplier": 0.8, "dry_allowed_length": 12, "dry_sequence_breakers": [],
              "json_closing_reserve": 128}
LOOP_PENALTY = {"frequency_penalty": 0.5}


def loop_guard(request: ChatRequest) -> dict:
    """The loop guard's fields that `request` leaves unset. The closing reserve is at most half the reply's budget:
    a reserve of the whole budget closes every string at its first quote (a 96-token request came back as JSON of
    empty strings)."""
    guard = {**LOOP_GUARD, "json_closing_reserve": min(LOOP_GUARD["json_closing_reserve"], request.max_tokens // 2)}
    return {k: v for k, v in guard.items() if getattr(request, k) is None}


class Gateway:
    def __init__(self, store: BlobStore, providers: dict[str, ProviderConfig], *, replay: bool = False,
                 max_attempts: int = 4, max_repairs: int = 2, batch_poll_s: float = 2.0,
                 counters: SharedCounters | None = None, rate_wait_s: float = 30.0, cooldown_s: float = 60.0,
                 caller_max_requests: int | None = None, caller_max_tokens: int | None = None):
        self.store = store
        self.cache = ResponseCache(store)
        self.calllog = CallLog(store)
        self.replay = replay
        self.max_repairs = max_repairs
        self.max_attempts = max_attempts
        self.batch_poll_s = batch_poll_s
        self.caller_max_requests = caller_max_requests
        self.caller_max_tokens = caller_max_tokens
        # Made without settings (tests, scripts): the Redis the settings name by default.
        self.counters = counters or SharedCounters(Settings.model_fields["redis_url"].default,
                                                   Settings.model_fields["redis_prefix"].default)
        self.providers = make_providers(providers, self.calllog, self.counters, rate_wait_s)
        self.router = ProviderRouter(self.providers, self.calllog, max_attempts, cooldown_s)
        self._resolve_lock = threading.Lock()

    @classmethod
    def from_settings(cls, store: BlobStore, settings) -> "Gateway":
        return cls(store, load_providers(settings.llm_providers), replay=settings.llm_replay,
                   max_attempts=settings.llm_max_attempts, max_repairs=settings.llm_max_repairs,
                   batch_poll_s=settings.llm_batch_poll_s,
                   counters=SharedCounters(settings.redis_url, settings.redis_prefix),
                   rate_wait_s=settings.llm_rate_limit_wait_s, cooldown_s=settings.llm_cooldown_s,
                   caller_max_requests=settings.llm_chat_max_requests_per_hour or None,
                   caller_max_tokens=settings.llm_chat_max_tokens_per_hour or None)

    def close(self) -> None:
        self.counters.close()

    def caller_scope(self, caller: str) -> CallScope:
        """A call made through the gateway's doors for `caller`: it spends the caller's hourly budget
        (FLAWFORGE_LLM_CHAT_MAX_*_PER_HOUR), counted for every replica alike."""
        return CallScope(budget=CallerBudget(self.counters, caller, self.caller_max_requests, self.caller_max_tokens))

    @property
    def batches(self) -> BatchManager:
        return BatchManager(self)

    # --- routing --------------------------------------------------------------------------
    def resolve(self, model: str, scope: CallScope) -> tuple[Provider, str]:
        """The provider serving `model` ('provider/model' names it explicitly) and its upstream name."""
        prefix, _, rest = model.partition("/")
        if rest and prefix in self.providers:
            return self.providers[prefix], rest
        with self._resolve_lock:
            known = []
            for provider in self.providers.values():
                served = provider.models()
                if model in served:
                    return provider, model
                known += [f"{provider.name}/{m}" for m in served]
        raise UnknownModel(f"unknown model {model!r}; known: {', '.join(known) or '(none)'}")

    def provider_for(self, request: ChatRequest, scope: CallScope) -> tuple[Provider, str]:
        """`resolve` for a request: a request with tools is refused where its provider is configured without them
        (`tools: false`), not sent with its tools dropped."""
        provider, upstream = self.resolve(request.model, scope)
        if request.tools and not provider.config.tools:
            raise InvalidRequest(f"provider {provider.name!r} is configured without tool calls (tools: false) and "
                                 f"this request for {request.model!r} carries tools")
        return provider, upstream

    # --- calls ----------------------------------------------------------------------------
    def chat(self, request: ChatRequest, scope: CallScope | None = None) -> ChatResult:
        scope = scope or CallScope()
        scope.check()
        fp = fingerprint(request)
        cached = self.cache.get(fp)
        if cached is not None:
            return cached
        if self.replay:
            raise ReplayMiss(f"replay mode: no cached response for this {request.model!r} request "
                             f"(fingerprint {fp[:16]}); replay makes no model calls")
        provider, upstream = self.provider_for(request, scope)
        scope.budget.spend_request()
        result = self._timed_chat(provider, request, upstream, fp, scope)
        scope.budget.spend_tokens(result.usage.total_tokens)
        return self.cache.put(result, self.router.secrets)

    def chat_stream(self, request: ChatRequest, scope: CallScope | None = None) -> Iterator[str | ChatResult]:
        """The reply's text in pieces as the provider streams it, then the whole reply (cached, as `chat` caches
        it); a cached reply comes as one piece. Nothing runs before the first piece is asked for: whoever answers
        over HTTP asks for it before answering, so a refusal is an error status, not a broken stream. A request with
        tools is refused: the pieces are text, and a call would be lost from them."""
        scope = scope or CallScope()
        scope.check()
        if request.tools:
            raise InvalidRequest("tool calls are not streamed: ask for them without stream")
        fp = fingerprint(request)
        cached = self.cache.get(fp)
        if cached is not None:
            yield cached.content
            yield cached
            return
        if self.replay:
            raise ReplayMiss(f"replay mode: no cached response for this {request.model!r} request "
                             f"(fingerprint {fp[:16]}); replay makes no model calls")
        provider, upstream = self.provider_for(request, scope)
        scope.budget.spend_request()
        with self._timed(provider, upstream) as timed:
            for piece in self.router.stream(provider, request, upstream, fp, scope):
                if isinstance(piece, ChatResult):
                    timed(piece)
                    scope.budget.spend_tokens(piece.usage.total_tokens)
                    piece = self.cache.put(piece, self.router.secrets)
                yield piece

    @contextmanager
    def _timed(self, provider: Provider, upstream: str) -> Iterator[Callable[[ChatResult], None]]:
        """Counts and times a model call (flawforge_model_*): every call the platform makes passes here."""
        labels = (provider.name, upstream)
        started = time.perf_counter()

        def done(result: ChatResult) -> None:
            MODEL_SECONDS.labels(*labels).observe(time.perf_counter() - started)
            MODEL_REQUESTS.labels(*labels, "ok").inc()
            MODEL_TOKENS.labels(*labels, "prompt").inc(result.usage.prompt_tokens)
            MODEL_TOKENS.labels(*labels, "completion").inc(result.usage.completion_tokens)

        try:
            yield done
        except Exception:
            MODEL_REQUESTS.labels(*labels, "error").inc()
            raise

    def _timed_chat(self, provider: Provider, request: ChatRequest, upstream: str, fp: str,
                    scope: CallScope) -> ChatResult:
        with self._timed(provider, upstream) as timed:
            result = self.router.chat(provider, request, upstream, fp, scope)
            timed(result)
        return result

    def chat_many(self, requests: list[ChatRequest], scope: CallScope | None = None, concurrency: int = 4,
                  on_settled: Callable[[], None] = lambda: None) -> list[ChatResult | LLMError]:
        """Synchronous calls side by side; a failed request yields its error, the others go on."""
        scope = scope or CallScope()

        def one(request: ChatRequest) -> ChatResult | LLMError:
            try:
                return self.chat(request, scope)
            except LLMError as exc:
                return exc
            finally:
                on_settled()

        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            return list(pool.map(one, requests))

    def structured(self, request: ChatRequest, schema: type[T], scope: CallScope | None = None,
                   max_repairs: int | None = None) -> StructuredOutcome[T]:
        return self.structured_many([request], schema, scope, max_repairs=max_repairs)[0]

    def structured_many(self, requests: list[ChatRequest], schema: type[T], scope: CallScope | None = None, *,
                        mode: Literal["sync", "batch"] = "sync", concurrency: int = 4,
                        max_repairs: int | None = None,
                        on_settled: Callable[[], None] = lambda: None) -> list[StructuredOutcome[T]]:
        """JSON replies validated against `schema`. A provider that enforces the schema while decoding gets
        it in response_format and no repairs (a reply it cut at max_tokens would come back cut again), and
        its loop guard where it has one (LOOP_GUARD, the fields the request leaves unset); a reply it cut,
        most often a small model's greedy repetition loop, is asked for once more with a frequency penalty.
        For the other providers, invalid replies are sent back for repair a bounded number of times."""
        scope = scope or CallScope()
        repairs = self.max_repairs if max_repairs is None else max_repairs
        with_schema = {"response_schema": schema.model_json_schema()}
        outcomes = [StructuredOutcome[T]() for _ in requests]
        configs = {i: self._provider_config(r.model, scope) for i, r in enumerate(requests)}
        enforced = {i: config is not None and config.json_schema for i, config in configs.items()}
        guarded = {i: enforced[i] and configs[i].loop_guard for i in configs}
        pending = {i: r.model_copy(update={**with_schema, **(loop_guard(r) if guarded[i] else {})})
                   for i, r in enumerate(requests)}
        repairs_of = {i: 0 if enforced[i] else repairs for i in range(len(requests))}
        for round_no in range(max(repairs, 1) + 1):
            if not pending:
                break
            indices = list(pending)
            replies = self._run_round([pending[i] for i in indices], scope, mode, concurrency, on_settled)
            next_pending = {}
            for i, reply in zip(indices, replies):
                if isinstance(reply, LLMError):
                    outcomes[i].error = reply if outcomes[i].error is None else kept_reason(outcomes[i].error, reply)
                    continue
                outcomes[i].replies.append(reply)
                try:
                    outcomes[i].value = parse_reply(reply.content, schema)
                    outcomes[i].error = None
                except InvalidModelOutput as exc:
                    cut = " (the reply was cut at max_tokens)" if reply.finish_reason == "length" else ""
                    asked = ("; asked again after a cut reply" if outcomes[i].loop_retried
                             else f" (after {outcomes[i].repairs} repairs)")
                    outcomes[i].error = InvalidModelOutput(f"{exc}{cut}{asked}")
                    if round_no < repairs_of[i]:
                        next_pending[i] = repair_request(pending[i], reply.content, str(exc))
                    elif enforced[i] and not guarded[i] and cut and not outcomes[i].loop_retried:
                        outcomes[i].loop_retried = True
                        next_pending[i] = pending[i].model_copy(update=LOOP_PENALTY)
            pending = next_pending
        return outcomes

    def _provider_config(self, model: str, scope: CallScope) -> ProviderConfig | None:
        try:
            provider, _ = self.resolve(model, scope)
        except LLMError:
            return None  # the call itself reports what is wrong with the model
        return provider.config

    def _run_round(self, requests: list[ChatRequest], scope: CallScope, mode: str, concurrency: int,
                   on_settled: Callable[[], None]) -> list[ChatResult | LLMError]:
        if mode == "sync":
            return self.chat_many(requests, scope, concurrency, on_settled)
        rows = [BatchRow(custom_id=str(i), request=r) for i, r in enumerate(requests)]
        results = self.batches.run(rows, scope)
        for _ in results:
            on_settled()
        return [row.result if row.result is not None else error_of(row.error) for row in results]
