"""The trace-executor's HTTP API: run a program, a batch of variants, or a module with its tests.

Sandbox work runs on threads of its own, a bounded number (requests beyond it wait without
holding a thread): the app's shared threadpool, which /healthz, /readyz and /metrics use, is
never taken by units waiting for a slot. There are more of these threads than slots, so that
single programs waiting for a slot can share the next unit (see engine.Sandbox.execute).
Results are serialised on those threads too, not on the event loop. A request whose client goes away
meanwhile has its units killed (the engine's Cancellation): its slots are free for the next caller.
"""
from __future__ import annotations

import logging

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from flawforge.proto.sandbox import (BatchRequest, BatchResult, ExecRequest, ExecutionResult, LayerReport,
                                     SuiteExecRequest, SuiteRunResult, TestRunRequest, TestRunResult, UnitKind)
from flawforge.runtime.platform import Platform
from flawforge.sandbox import SandboxUnavailable
from flawforge.sandbox.engine import MAX_COALESCED, Cancellation, usable_cpus
from flawforge.sandbox.maximums import AboveMaximum
from flawforge.services.trace_executor.sandbox import run_unit, sandbox_for

log = logging.getLogger(__name__)
# How often a running request looks whether its client is still there, seconds.
DISCONNECT_POLL_S = 0.25


def sandbox_router(platform: Platform) -> APIRouter:
    router = APIRouter(prefix="/sandbox", tags=["sandbox"])
    settings = platform.settings
    try:  # start (and report the layers) with the app; a missing layer shows in /readyz and as 503s
        slots = sandbox_for(settings).workers
    except SandboxUnavailable as exc:
        log.error("sandbox unavailable: %s", exc)
        slots = settings.sandbox_workers or 2 * usable_cpus()
    limiter = anyio.CapacityLimiter(slots * MAX_COALESCED)

    def run_json(unit: UnitKind, body: BaseModel, cancellation: Cancellation) -> bytes:
        try:  # SandboxUnavailable is a 503 naming what is missing
            return run_unit(settings, unit, body, cancellation).model_dump_json().encode()
        except AboveMaximum as exc:
            raise RequestValidationError(exc.errors) from None

    async def cancel_on_disconnect(request: Request, cancellation: Cancellation) -> None:
        while not await request.is_disconnected():
            await anyio.sleep(DISCONNECT_POLL_S)
        log.info("client of %s went away: its sandbox units are cancelled", request.url.path)
        cancellation.cancel()

    async def answer(unit: UnitKind, body: BaseModel, request: Request) -> Response:
        cancellation, failure = Cancellation(), None
        async with anyio.create_task_group() as group:
            group.start_soon(cancel_on_disconnect, request, cancellation)
            try:
                content = await anyio.to_thread.run_sync(run_json, unit, body, cancellation, limiter=limiter)
            except Exception as exc:  # raised outside the group, where the app's handlers see it, not its group
                failure = exc
            group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return Response(content, media_type="application/json")

    @router.post("/exec", response_model=ExecutionResult)
    async def execute(body: ExecRequest, request: Request) -> Response:
        """Runs the module, calls `call` if given; with `trace`, every assignment of that function (or of the
        module's top level) in order, with exact typed values. The program's failure is a 200 with its outcome.
        Limits above the server's maximums (FLAWFORGE_SANDBOX_MAX_*) are a 422 naming the limit; a client that
        goes away has its units killed."""
        return await answer(UnitKind.EXEC, body, request)

    @router.post("/batch", response_model=BatchResult)
    async def batch(body: BatchRequest, request: Request) -> Response:
        """Traces `call` in the original and each variant, each as if in its own process; results in order. The
        programs times their timeout may ask for at most FLAWFORGE_SANDBOX_MAX_REQUEST_S."""
        return await answer(UnitKind.BATCH, body, request)

    @router.post("/tests", response_model=TestRunResult)
    async def tests(body: TestRunRequest, request: Request) -> Response:
        """Imports the module as `module_name` and runs the unittest tests; each test's outcome and failure text."""
        return await answer(UnitKind.TESTS, body, request)

    @router.post("/suite", response_model=SuiteRunResult)
    async def suite(body: SuiteExecRequest, request: Request) -> Response:
        """Runs the pytest suite of the project in `archive_base64` with `overlay` written over it; each test's
        outcome by node id (and, with `coverage_files`, the project functions each executed)."""
        return await answer(UnitKind.SUITE, body, request)

    @router.get("/layers")
    def layers() -> LayerReport:
        """Which isolation layers are active on this host, which are missing and why, which are required."""
        return sandbox_for(settings).layer_report()

    return router
