"""HTTP routers of the inference-server: OpenAI-compatible endpoints, the Batch API, research.

Errors of the OpenAI-compatible and research endpoints come as OpenAI's `{"error": {...}}` body
with the status, the field at fault and a stable code (`openai_error_body`, the service's error
format under /v1); malformed bodies get FastAPI's 422 findings.
"""
from __future__ import annotations

import time
from fastapi import APIRouter, File, Form, Query, Response, UploadFile

from flawforge.inference import openai_api
from flawforge.inference.batches import BatchStore, FileStore
from flawforge.inference.errors import RequestError, openai_error
from flawforge.proto.inference import (
    BATCH_QUEUE, Batch, BatchCreate, BatchList, BatchRequested, ChatCompletion, ChatCompletionRequest, Completion,
    CompletionRequest, ErrorResponse, FileDeleted, FileList, FileObject, LensRequest, LensResponse, ModelCard,
    ModelList, PatchRequest, PatchResponse, PressureRequest, PressureResponse, ScoreRequest, ScoreResponse, TraceRequest, TraceResponse,
)
from flawforge.runtime.http_errors import ErrorAnswer
from flawforge.runtime.platform import Platform
from flawforge.services.inference_server.host import host_for

ERRORS = {status: {"model": ErrorResponse} for status in (400, 404, 409, 422, 503)}


def openai_error_body(answer: ErrorAnswer) -> dict:
    """OpenAI's error object for every error under /v1; a malformed body keeps FastAPI's findings."""
    if answer.errors is not None:
        return answer.default_body()
    return openai_error(answer.status, answer.message, answer.param, answer.code)


def openai_router(platform: Platform) -> APIRouter:
    settings = platform.settings
    host = host_for(settings).start()
    router = APIRouter(prefix="/v1", tags=["openai"], responses=ERRORS)

    def card() -> ModelCard:
        return ModelCard(id=host.ready().model_name, created=host.loaded_at, owned_by="flawforge")

    @router.get("/models")
    def list_models() -> ModelList:
        """The served model; 503 until it is loaded."""
        return ModelList(data=[card()])

    @router.get("/models/{model_id:path}")
    def get_model(model_id: str) -> ModelCard:
        openai_api.check_model(host.ready().model_name, model_id)
        return card()

    @router.post("/chat/completions")
    def chat_completions(body: ChatCompletionRequest) -> ChatCompletion:
        return openai_api.chat_completion(host.ready(), body, settings.inference_default_max_tokens)

    @router.post("/completions")
    def completions(body: CompletionRequest) -> Completion:
        return openai_api.completion(host.ready(), body)

    return router


def research_router(platform: Platform) -> APIRouter:
    from flawforge.inference import research_api  # torch: only where the service runs, not with its spec

    host = host_for(platform.settings).start()
    budget = platform.settings.inference_batch_tokens
    router = APIRouter(prefix="/v1/research", tags=["research"], responses=ERRORS)

    @router.post("/score")
    def score(body: ScoreRequest) -> ScoreResponse:
        """Teacher-forced log-probability of each continuation after its prompt."""
        return research_api.score(host.ready(), body)

    @router.post("/pressure")
    def pressure(body: PressureRequest) -> PressureResponse:
        """P_sem of a target word after a prompt: the probability of any of its token variants (36 written
        forms, deduplicated), each teacher-forced; also their sum before clamping and the single-token part."""
        return _answer(lambda: research_api.pressure(host.ready(), body))

    @router.post("/trace")
    def trace(body: TraceRequest) -> TraceResponse:
        """One greedy step; every layer's hidden states and attentions stored as .pt blobs."""
        return research_api.trace(host.research_model(), platform.store, body, budget)

    @router.post("/logit-lens")
    def logit_lens(body: LensRequest) -> LensResponse:
        """Probability of the target tokens read out of the residual stream at every layer."""
        return research_api.logit_lens(host.research_model(), body, budget)

    @router.post("/patch")
    def patch(body: PatchRequest) -> PatchResponse:
        """The target prompt's probabilities with the source's residual stream patched in."""
        return research_api.patch(host.research_model(), body, budget)

    return router


def batch_router(platform: Platform) -> APIRouter:
    files, batches = FileStore(platform.store), BatchStore(platform.store)
    router = APIRouter(prefix="/v1", tags=["batch"], responses=ERRORS)

    @router.post("/files")
    def upload_file(file: UploadFile = File(...), purpose: str = Form(...)) -> FileObject:
        """Uploads a batch input file (JSONL, one request a line)."""
        if purpose != "batch":
            raise RequestError(400, f"purpose must be 'batch', got {purpose!r}", param="purpose",
                               code="invalid_purpose")
        return files.create(file.filename or "input.jsonl", purpose, file.file.read(), int(time.time()))

    @router.get("/files")
    def list_files(purpose: str | None = None) -> FileList:
        return FileList(data=files.list(purpose))

    @router.get("/files/{file_id}")
    def get_file(file_id: str) -> FileObject:
        return files.get(file_id)

    @router.get("/files/{file_id}/content")
    def file_content(file_id: str) -> Response:
        return Response(files.content(file_id), media_type="application/octet-stream")

    @router.delete("/files/{file_id}")
    def delete_file(file_id: str) -> FileDeleted:
        return files.delete(file_id)

    @router.post("/batches")
    def create_batch(body: BatchCreate) -> Batch:
        """Records the batch (status validating) and queues it for the worker."""
        source = files.get(body.input_file_id)
        if source.purpose != "batch":
            raise RequestError(400, f"file {source.id} has purpose {source.purpose!r}, not 'batch'",
                               param="input_file_id", code="invalid_input_file")
        batch = batches.create(body, int(time.time()))
        platform.bus.declare(BATCH_QUEUE)
        platform.bus.publish(BATCH_QUEUE, BatchRequested(batch_id=batch.id))
        return batch

    @router.get("/batches")
    def list_batches(limit: int = Query(20, ge=1, le=100), after: str | None = None) -> BatchList:
        """Newest first; `after` is the last id of the previous page."""
        found = batches.list()
        if after is not None:
            ids = [b.id for b in found]
            found = found[ids.index(after) + 1:] if after in ids else []
        page = found[:limit]
        return BatchList(data=page, first_id=page[0].id if page else None, last_id=page[-1].id if page else None,
                         has_more=len(found) > limit)

    @router.get("/batches/{batch_id}")
    def get_batch(batch_id: str) -> Batch:
        return batches.get(batch_id)

    @router.post("/batches/{batch_id}/cancel")
    def cancel_batch(batch_id: str) -> Batch:
        """Asks the worker to stop; the batch is `cancelling` until it has written what it finished."""
        return batches.request_cancel(batch_id, int(time.time()))

    return router
