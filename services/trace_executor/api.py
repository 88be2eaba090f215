"""The trace-executor's HTTP API: run a program, a batch of variants, or a module with its tests.

Sandbox work runs on threads of its own, a bounded number (requests beyond it wait without
holding a thread): the app's shared threadpool, which /healthz, /readyz and /metrics use, is
never taken by units waiting for a slot. There are more of these threads than slots, so that
single programs waiting for a slot can share the next unit (see engine.Sandbox.execute).
Results are serialised on those threads too, not on the event loop.
"""
from __future__ import annotations

import logging

import anyio
from fastapi import APIRouter, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from flawforge.proto.sandbox import (BatchRequest, BatchResult, ExecRequest, ExecutionResult, LayerReport,
                                     SuiteBatchExecRequest, SuiteBatchResult, SuiteExecRequest, SuiteRunResult,
                                     TestRunRequest, TestRunResult, UnitKind)
from flawforge.runtime.platform import Platform
from flawforge.sandbox import SandboxUnavailable
from flawforge.sandbox.engine import MAX_COALESCED, usable_cpus
from flawforge.sandbox.maximums import AboveMaximum
from flawforge.services.trace_executor.sandbox import run_unit, sandbox_for

log = logging.getLogger(__name__)


def sandbox_router(platform: Platform) -> APIRouter:
    router = APIRouter(prefix="/sandbox", tags=["sandbox"])
    settings = platform.settings
    try:  # start (and report the layers) with the app; a missing layer shows in /readyz and as 503s
        slots = sandbox_for(settings).workers
    except SandboxUnavailable as exc:
        log.error("sandbox unavailable: %s", exc)
        slots = settings.sandbox_workers or 2 * usable_cpus()
    limiter = anyio.CapacityLimiter(slots * MAX_COALESCED)

    def run_json(unit: UnitKind, body: BaseModel) -> bytes:  # SandboxUnavailable is a 503 naming what is missing
        try:
            return run_unit(settings, unit, body).model_dump_json().encode()
        except AboveMaximum as exc:
            raise RequestValidationError(exc.errors) from None

    async def answer(unit: UnitKind, body: BaseModel) -> Response:
        content = await anyio.to_thread.run_sync(run_json, unit, body, limiter=limiter)
        return Response(content, media_type="application/json")

    @router.post("/exec", response_model=ExecutionResult)
    async def execute(body: ExecRequest) -> Response:
        """Runs the module, calls `call` if given; with `trace`, every assignment of that function (or of the
        module's top level) in order, with exact typed values. The program's failure is a 200 with its outcome.
        Limits above the server's maximums (FLAWFORGE_SANDBOX_MAX_*) are a 422 naming the limit."""
        return await answer(UnitKind.EXEC, body)

    @router.post("/batch", response_model=BatchResult)
    async def batch(body: BatchRequest) -> Response:
        """Traces `call` in the original and each variant, each as if in its own process; results in order."""
        return await answer(UnitKind.BATCH, body)

    @router.post("/tests", response_model=TestRunResult)
    async def tests(body: TestRunRequest) -> Response:
        """Imports the module as `module_name` and runs the unittest tests; each test's outcome and failure text."""
        return await answer(UnitKind.TESTS, body)

    @router.post("/suite", response_model=SuiteRunResult)
    async def suite(body: SuiteExecRequest) -> Response:
        """Runs the pytest suite of the project in `archive_base64` with `overlay` written over it; each test's
        outcome by node id (and, with `coverage_files`, the project functions each executed)."""
        return await answer(UnitKind.SUITE, body)

    @router.post("/suite-batch", response_model=SuiteBatchResult)
    async def suite_batch(body: SuiteBatchExecRequest) -> Response:
        """Collects the project's suite once, then makes each change in place and runs its tests; each change's
        result in order, null where it must run alone (POST /suite with the change as overlay)."""
        return await answer(UnitKind.SUITE_BATCH, body)

    @router.get("/layers")
    def layers() -> LayerReport:
        """Which isolation layers are active on this host, which are missing and why, which are required."""
        return sandbox_for(settings).layer_report()

    return router
