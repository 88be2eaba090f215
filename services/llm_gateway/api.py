"""HTTP API of the llm-gateway: chat calls, batches from JSONL files, providers, and an OpenAI-compatible /v1 over
every configured provider. Each caller (the token's owner) spends one budget, whichever door it uses; every
call goes through the cache, the limits and the call log."""
from __future__ import annotations

import json
import time
from itertools import chain
from typing import Iterator

from fastapi import APIRouter, Depends, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from flawforge.inference.errors import openai_error
from flawforge.llm.batches import parse_batch_file
from flawforge.llm.cache import fingerprint
from flawforge.llm.errors import LLMError, MalformedBatchLine
from flawforge.llm.gateway import Gateway
from flawforge.llm.openai_compat import chunks_of, completion_of
from flawforge.proto.inference import ChatCompletion, ChatCompletionChunk, ModelCard, ModelList
from flawforge.proto.llm import (BATCH_QUEUE, BatchDriveRequested, BatchRecord, ChatRequest, ChatResult,
                                 OpenAIChatRequest, ProviderConfig, RowResult)
from flawforge.runtime.auth import caller
from flawforge.runtime.platform import Platform

CACHED_HEADER = "x-flawforge-cached"


def gateway_router(platform: Platform) -> APIRouter:
    """/llm and /v1 over one gateway: one cache, one call log, one Router and its providers' slots."""
    gateway = Gateway.from_settings(platform.store, platform.settings)
    router = APIRouter()
    router.include_router(llm_routes(platform, gateway))
    router.include_router(openai_routes(gateway))
    return router


def llm_routes(platform: Platform, gateway: Gateway) -> APIRouter:
    router = APIRouter(prefix="/llm", tags=["llm"])

    @router.get("/providers")
    def list_providers() -> list[ProviderConfig]:
        """The configured providers (API keys are named by their environment variable, never shown)."""
        return [provider.config for provider in gateway.providers.values()]

    @router.post("/chat")
    def chat(body: ChatRequest, who: str = Depends(caller)) -> ChatResult:
        """One chat completion through the cache, the log and the provider serving `model`, within the caller's
        hourly budget (429 budget_exceeded when spent, with Retry-After)."""
        return gateway.chat(body, gateway.caller_scope(who))

    @router.post("/batches", status_code=status.HTTP_202_ACCEPTED)
    async def submit_batch(request: Request, who: str = Depends(caller)) -> BatchRecord:
        """Takes an OpenAI batch input file (JSONL, chat completions) as the request body.

        Malformed lines become failed rows naming the line and the problem; the others run. The file is at most
        FLAWFORGE_MAX_REQUEST_BYTES, like every request body. Each row sent, and each row sent again after a
        failure a retry may fix, spends the caller's hourly budget as /llm/chat does: a row past it fails with
        budget_exceeded and is not sent.
        """
        data = await request.body()
        if not data.strip():
            raise MalformedBatchLine("the batch file is empty")
        rows, rejected = parse_batch_file(data)
        record = await run_in_threadpool(gateway.batches.submit, rows, gateway.caller_scope(who), rejected=rejected,
                                         created_by=who)
        if record.state == "in_progress":
            platform.bus.declare(BATCH_QUEUE)
            platform.bus.publish(BATCH_QUEUE, BatchDriveRequested(batch_id=record.batch_id))
        return record

    @router.get("/batches/{batch_id}")
    def get_batch(batch_id: str) -> BatchRecord:
        return gateway.batches.get(batch_id)

    @router.get("/batches/{batch_id}/results")
    def batch_results(batch_id: str) -> list[RowResult]:
        """One result or error per row, in the order of the batch file."""
        return gateway.batches.results(batch_id)

    @router.post("/batches/{batch_id}/cancel")
    def cancel_batch(batch_id: str) -> BatchRecord:
        """Stops the provider batches still running; finished rows keep their answers."""
        return gateway.batches.cancel(batch_id)

    return router


def _events(chunks: Iterator[ChatCompletionChunk]) -> Iterator[str]:
    """Server-sent events of a stream's chunks; a failure once the stream has started is its last event."""
    try:
        for chunk in chunks:
            yield f"data: {chunk.model_dump_json()}\n\n"
    except LLMError as exc:
        yield f"data: {json.dumps(openai_error(exc.http_status, str(exc), None, exc.code))}\n\n"
    yield "data: [DONE]\n\n"


def openai_routes(gateway: Gateway) -> APIRouter:
    """OpenAI's chat completions and model list over the configured providers, for the OpenAI SDK or LiteLLM as
    clients; errors in OpenAI's shape (the service's error format under /v1)."""
    router = APIRouter(prefix="/v1", tags=["openai"])

    @router.get("/models")
    def list_models() -> ModelList:
        """Every model of every provider, as 'provider/model'; a provider that cannot list its models now is left
        out."""
        cards = []
        for provider in gateway.providers.values():
            try:
                served = provider.models()
            except LLMError:
                continue
            cards += [ModelCard(id=f"{provider.name}/{model}", created=0, owned_by=provider.name) for model in served]
        return ModelList(data=cards)

    @router.post("/chat/completions", response_model=ChatCompletion)
    async def chat_completions(body: OpenAIChatRequest, who: str = Depends(caller)):
        """A chat completion, or with `stream` its chunks as server-sent events, through the cache (an answer
        served from it says so in the x-flawforge-cached header), the caller's budget, the provider's limits and
        the call log. Refusals come before the stream starts, as error statuses."""
        request, scope, created = body.chat_request(), gateway.caller_scope(who), int(time.time())
        if not body.stream:
            result = await run_in_threadpool(gateway.chat, request, scope)
            return JSONResponse(completion_of(result, created).model_dump(mode="json"),
                                headers={CACHED_HEADER: str(result.cached).lower()})
        pieces = gateway.chat_stream(request, scope)
        first = await run_in_threadpool(next, pieces)
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        chunks = chunks_of(chain([first], pieces), fingerprint(request), body.model, created, include_usage)
        return StreamingResponse(_events(chunks), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    return router
