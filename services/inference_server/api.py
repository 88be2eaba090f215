"""HTTP routers of the inference-server: OpenAI-compatible endpoints, the Batch API, research.

Every error under /v1 comes as OpenAI's `{"error": {...}}` body with the status, the field at
fault and a stable code (`errors.openai_error_body`, the service's error format under /v1); a body that
fails validation is a 400 naming the parameter, as OpenAI and vLLM answer it (`OpenAIRoute`).
Fields the server does not know are ignored, logged, and named in the `x-flawforge-ignored-fields`
response header.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Callable, Iterator

import anyio
from fastapi import APIRouter, Depends, File, Form, Query, Request, Response, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute

from flawforge.inference import openai_api
from flawforge.inference.batches import BatchStore, FileStore
from flawforge.inference.errors import RequestError
from flawforge.inference.host import host_for, vllm_server
from flawforge.inference.upstream import Answer, VllmServer, checked_body
from flawforge.proto.inference import (
    BATCH_QUEUE, Batch, BatchCreate, BatchList, BatchRequested, ChatCompletion, ChatCompletionRequest, Completion,
    CompletionRequest, ErrorResponse, FileDeleted, FileList, FileObject, LensRequest, LensResponse, ModelCard,
    ModelList, PatchRequest, PatchResponse, PressureRequest, PressureResponse, ScoreRequest, ScoreResponse, TraceRequest, TraceResponse,
)
from flawforge.runtime.auth import caller
from flawforge.runtime.platform import Platform

log = logging.getLogger(__name__)

ERRORS = {status: {"model": ErrorResponse} for status in (400, 401, 404, 409, 503)}
IGNORED_HEADER = "x-flawforge-ignored-fields"


class OpenAIRoute(APIRoute):
    """A /v1 route whose malformed body is a 400 naming the parameter, as OpenAI and vLLM answer it (the app's
    own handler answers FastAPI's 422)."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                raise openai_api.invalid_request(list(exc.errors())) from None

        return route


def _ignored(body, response: Response) -> Response:
    """Names the fields of `body` that were ignored, in a header and the log."""
    ignored = body.ignored_fields()
    if ignored:
        log.info("ignored request fields: %s", ", ".join(ignored))
        response.headers[IGNORED_HEADER] = ",".join(ignored)
    return response


def _blob_chunks(store, key: str, size: int = 4 << 20) -> Iterator[bytes]:
    offset = 0
    while chunk := store.get_range(key, offset, size):
        yield chunk
        offset += len(chunk)


def _event_stream(chunks: Callable[[Callable[[], bool]], Iterator[dict]]) -> StreamingResponse:
    """Server-sent events from `chunks`, which runs on a thread of its own (it waits on the scheduler for each
    token); a client that goes away stops it, and frees its rows of the batch, at the next step."""
    gone = threading.Event()
    events: queue.Queue = queue.Queue()

    def produce() -> None:
        try:
            for chunk in chunks(gone.is_set):
                events.put(f"data: {json.dumps(chunk)}\n\n")
        except RequestError as exc:
            events.put(f"data: {json.dumps(exc.body())}\n\n")
        except Exception as exc:  # the stream has started: the error travels as its last event
            log.exception("a streamed completion failed")
            events.put(f"data: {json.dumps(RequestError(500, f'internal error: {type(exc).__name__}').body())}\n\n")
        finally:
            events.put(None)

    async def body():
        threading.Thread(target=produce, name="stream-completion", daemon=True).start()
        try:
            while (event := await anyio.to_thread.run_sync(events.get)) is not None:
                yield event
            yield "data: [DONE]\n\n"
        finally:
            gone.set()

    return StreamingResponse(body(), media_type="text/event-stream", headers={"cache-control": "no-cache"})


def openai_router(platform: Platform) -> APIRouter:
    settings = platform.settings
    host = host_for(settings).start()
    router = APIRouter(prefix="/v1", tags=["openai"], responses=ERRORS, route_class=OpenAIRoute)
    caller_limits = openai_api.CallerLimits.from_settings(settings)

    def limits(who: str = Depends(caller)) -> openai_api.RequestLimits:
        """The caller's bounds on one request."""
        return caller_limits.of(who)

    upstream = vllm_server(settings)
    if upstream is not None:
        _pass_through(router, upstream, limits)
        return router

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
    def chat_completions(body: ChatCompletionRequest,
                         bounds: openai_api.RequestLimits = Depends(limits)) -> ChatCompletion:
        """A chat completion, or with `stream` its chunks as server-sent events."""
        backend = host.ready()
        if body.stream:
            prepared = openai_api.prepare_chat(backend, body, bounds)
            return _ignored(body, _event_stream(
                lambda cancelled: openai_api.chat_chunks(backend, body, prepared, cancelled)))
        answer = openai_api.chat_completion(backend, body, bounds)
        return _ignored(body, JSONResponse(answer.model_dump(mode="json")))

    @router.post("/completions")
    def completions(body: CompletionRequest, bounds: openai_api.RequestLimits = Depends(limits)) -> Completion:
        """A text completion, or with `stream` its chunks as server-sent events."""
        backend = host.ready()
        if body.stream:
            prepared = openai_api.prepare_completion(backend, body, bounds)
            return _ignored(body, _event_stream(
                lambda cancelled: openai_api.completion_chunks(backend, body, prepared, cancelled)))
        return _ignored(body, JSONResponse(openai_api.completion(backend, body, bounds).model_dump(mode="json")))

    return router


def _pass_through(router: APIRouter, server: VllmServer, limits: Callable) -> None:
    """The generation routes where vLLM's server generates (flawforge.inference.upstream): checked here as the
    transformers engine checks them, answered by vLLM as it answers, streams chunk by chunk."""

    @router.get("/models")
    async def list_models() -> ModelList:
        """The models vLLM serves."""
        return _answer(await server.answer("/models"))

    @router.get("/models/{model_id:path}")
    async def get_model(model_id: str) -> ModelCard:
        return _answer(await server.answer(f"/models/{model_id}"))

    @router.post("/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request,
                               bounds: openai_api.RequestLimits = Depends(limits)) -> ChatCompletion:
        """vLLM's chat completion, or with `stream` its chunks as vLLM sends them."""
        return _answer(await server.answer("/chat/completions", checked_body(body, await request.json(), bounds)))

    @router.post("/completions")
    async def completions(body: CompletionRequest, request: Request,
                          bounds: openai_api.RequestLimits = Depends(limits)) -> Completion:
        """vLLM's text completion, or with `stream` its chunks as vLLM sends them."""
        return _answer(await server.answer("/completions", checked_body(body, await request.json(), bounds)))


def _answer(answer: Answer) -> Response:
    """vLLM's answer as it came: its status and body, or its stream; a client that goes away closes the stream and
    with it the request to vLLM."""
    if answer.chunks is None:
        return Response(answer.body, status_code=answer.status, media_type=answer.media_type)
    return StreamingResponse(answer.chunks, media_type=answer.media_type, headers={"cache-control": "no-cache"})


def research_router(platform: Platform) -> APIRouter:
    from flawforge.inference import research_api  # torch: only where the service runs, not with its spec

    settings = platform.settings
    host = host_for(settings).start()
    budget = settings.inference_batch_tokens
    router = APIRouter(prefix="/v1/research", tags=["research"], responses=ERRORS, route_class=OpenAIRoute)

    @router.post("/score")
    def score(body: ScoreRequest) -> ScoreResponse:
        """Teacher-forced log-probability of each continuation after its prompt."""
        return research_api.score(host.ready(), body)

    @router.post("/pressure")
    def pressure(body: PressureRequest) -> PressureResponse:
        """P_sem of a target word after a prompt: the probability of any of its token variants (36 written
        forms, deduplicated), each teacher-forced; also their sum before clamping and the single-token part."""
        return research_api.pressure(host.ready(), body)

    @router.post("/trace")
    def trace(body: TraceRequest) -> TraceResponse:
        """One greedy step; every layer's hidden states and the last attention rows stored as .pt blobs."""
        return research_api.trace(host.research_model(), platform.store, body, budget,
                                  settings.inference_trace_max_mb << 20)

    @router.get("/traces/{name}", response_class=StreamingResponse,
                responses={200: {"content": {"application/octet-stream": {}}}})
    def trace_blob(name: str, who: str = Depends(caller)) -> StreamingResponse:
        """The trace blob a /trace result's `download` names, streamed (torch.load it; docs/traces.md)."""
        key = research_api.trace_key(name)
        if not platform.store.exists(key):
            raise RequestError(404, f"No such trace: {name!r}", param="name", code="trace_not_found")
        log.info("%s downloads trace %s", who, name)
        return StreamingResponse(_blob_chunks(platform.store, key), media_type="application/octet-stream",
                                 headers={"content-disposition": f'attachment; filename="{name}"'})

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
    router = APIRouter(prefix="/v1", tags=["batch"], responses=ERRORS, route_class=OpenAIRoute)

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
    def create_batch(body: BatchCreate, who: str = Depends(caller)) -> Batch:
        """Records the batch (status validating) and queues it for the worker; its lines are bounded by the
        creator's cap on completion tokens, as the creator's own requests are."""
        source = files.get(body.input_file_id)
        if source.purpose != "batch":
            raise RequestError(400, f"file {source.id} has purpose {source.purpose!r}, not 'batch'",
                               param="input_file_id", code="invalid_input_file")
        batch = batches.create(body, int(time.time()), created_by=who)
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
