"""HTTP API of the llm-gateway: chat calls, batches from JSONL files, providers."""
from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool

from flawforge.llm.batches import parse_batch_file
from flawforge.llm.errors import LLMError
from flawforge.llm.gateway import Gateway
from flawforge.llm.limits import CallScope, WindowBudget
from flawforge.proto.llm import BatchDriveRequested, BatchRecord, ChatRequest, ChatResult, ProviderConfig, RowResult
from flawforge.runtime.platform import Platform
from flawforge.services.llm_gateway.workers import BATCH_QUEUE

MAX_BATCH_FILE_BYTES = 64 << 20

HTTP_STATUS = {
    "unknown_model": status.HTTP_404_NOT_FOUND,
    "batch_not_found": status.HTTP_404_NOT_FOUND,
    "replay_miss": status.HTTP_404_NOT_FOUND,
    "context_length_exceeded": status.HTTP_400_BAD_REQUEST,
    "invalid_request": status.HTTP_400_BAD_REQUEST,
    "malformed_batch_line": status.HTTP_400_BAD_REQUEST,
    "invalid_output": status.HTTP_422_UNPROCESSABLE_CONTENT,
    "budget_exceeded": status.HTTP_429_TOO_MANY_REQUESTS,
    "cancelled": status.HTTP_409_CONFLICT,
    "log_unavailable": status.HTTP_503_SERVICE_UNAVAILABLE,
}


def http_error(exc: LLMError) -> HTTPException:
    return HTTPException(HTTP_STATUS.get(exc.code, status.HTTP_502_BAD_GATEWAY),
                         {"code": exc.code, "message": str(exc)})


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
        try:
            return gateway.chat(body, chat_scope)
        except LLMError as exc:
            raise http_error(exc) from None

    @router.post("/batches", status_code=status.HTTP_202_ACCEPTED)
    async def submit_batch(request: Request) -> BatchRecord:
        """Takes an OpenAI batch input file (JSONL, chat completions) as the request body.

        Malformed lines become failed rows naming the line and the problem; the others run.
        """
        data = await request.body()
        if not data.strip():
            raise HTTPException(status.HTTP_400_BAD_REQUEST, {"code": "malformed_batch_line",
                                                              "message": "the batch file is empty"})
        if len(data) > MAX_BATCH_FILE_BYTES:
            raise HTTPException(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
                                {"code": "invalid_request", "message": f"batch file over {MAX_BATCH_FILE_BYTES} bytes"})
        rows, rejected = parse_batch_file(data)
        try:
            record = await run_in_threadpool(gateway.batches.submit, rows, rejected=rejected)
        except LLMError as exc:
            raise http_error(exc) from None
        if record.state == "in_progress":
            platform.bus.declare(BATCH_QUEUE)
            platform.bus.publish(BATCH_QUEUE, BatchDriveRequested(batch_id=record.batch_id))
        return record

    @router.get("/batches/{batch_id}")
    def get_batch(batch_id: str) -> BatchRecord:
        try:
            return gateway.batches.get(batch_id)
        except LLMError as exc:
            raise http_error(exc) from None

    @router.get("/batches/{batch_id}/results")
    def batch_results(batch_id: str) -> list[RowResult]:
        """One result or error per row, in the order of the batch file."""
        try:
            return gateway.batches.results(batch_id)
        except LLMError as exc:
            raise http_error(exc) from None

    @router.post("/batches/{batch_id}/cancel")
    def cancel_batch(batch_id: str) -> BatchRecord:
        """Stops the provider batches still running; finished rows keep their answers."""
        try:
            return gateway.batches.cancel(batch_id)
        except LLMError as exc:
            raise http_error(exc) from None

    return router
