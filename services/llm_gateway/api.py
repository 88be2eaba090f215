"""HTTP API of the llm-gateway: chat calls, batches from JSONL files, providers."""
from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.concurrency import run_in_threadpool

from flawforge.llm.batches import parse_batch_file
from flawforge.llm.errors import MalformedBatchLine
from flawforge.llm.gateway import Gateway
from flawforge.llm.limits import CallScope, WindowBudget
from flawforge.proto.llm import (BATCH_QUEUE, BatchDriveRequested, BatchRecord, ChatRequest, ChatResult,
                                 ProviderConfig, RowResult)
from flawforge.runtime.platform import Platform

def llm_router(platform: Platform) -> APIRouter:
    router = APIRouter(prefix="/llm", tags=["llm"])
    settings = platform.settings
    gateway = Gateway.from_settings(platform.store, settings)
    chat_scope = CallScope(budget=WindowBudget(settings.llm_chat_max_requests_per_hour or None,
                                               settings.llm_chat_max_tokens_per_hour or None, window_s=3600))

    @router.get("/providers")
    def list_providers() -> list[ProviderConfig]:
        """The configured providers (API keys are named by their environment variable, never shown)."""
        return [provider.config for provider in gateway.providers.values()]

    @router.post("/chat")
    def chat(body: ChatRequest) -> ChatResult:
        """One chat completion through the cache, the log and the provider serving `model`, within the
        route's hourly budget (429 budget_exceeded when spent)."""
        return gateway.chat(body, chat_scope)

    @router.post("/batches", status_code=status.HTTP_202_ACCEPTED)
    async def submit_batch(request: Request) -> BatchRecord:
        """Takes an OpenAI batch input file (JSONL, chat completions) as the request body.

        Malformed lines become failed rows naming the line and the problem; the others run. The file is at most
        FLAWFORGE_MAX_REQUEST_BYTES, like every request body. Each row sent spends the hourly budget /llm/chat
        spends: a row past it fails with budget_exceeded and is not sent.
        """
        data = await request.body()
        if not data.strip():
            raise MalformedBatchLine("the batch file is empty")
        rows, rejected = parse_batch_file(data)
        record = await run_in_threadpool(gateway.batches.submit, rows, chat_scope, rejected=rejected)
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
