"""The trace-executor's HTTP API: run a program, a batch of variants, or a module with its tests."""
from __future__ import annotations

import logging

from fastapi import APIRouter

from flawforge.proto.sandbox import (BatchRequest, BatchResult, ExecRequest, ExecutionResult, LayerReport,
                                     TestRunRequest, TestRunResult)
from flawforge.runtime.platform import Platform
from flawforge.sandbox import Sandbox, SandboxUnavailable
from flawforge.services.trace_executor.sandbox import run_unit, sandbox_for

log = logging.getLogger(__name__)


def sandbox_router(platform: Platform) -> APIRouter:
    router = APIRouter(prefix="/sandbox", tags=["sandbox"])
    try:  # start (and report the layers) with the app; a missing layer shows in /readyz and as 503s
        sandbox_for(platform.settings)
    except SandboxUnavailable as exc:
        log.error("sandbox unavailable: %s", exc)

    def sandbox() -> Sandbox:  # SandboxUnavailable is a 503 naming what is missing
        return sandbox_for(platform.settings)

    @router.post("/exec")
    def execute(body: ExecRequest) -> ExecutionResult:
        """Runs the module, calls `call` if given; with `trace`, every assignment of that function (or of the
        module's top level) in order, with exact typed values. The program's failure is a 200 with its outcome."""
        return run_unit(sandbox(), "exec", body)

    @router.post("/batch")
    def batch(body: BatchRequest) -> BatchResult:
        """Traces `call` in the original and each variant, each in its own process; results in order."""
        return run_unit(sandbox(), "batch", body)

    @router.post("/tests")
    def tests(body: TestRunRequest) -> TestRunResult:
        """Imports the module as `module_name` and runs the unittest tests; each test's outcome and failure text."""
        return run_unit(sandbox(), "tests", body)

    @router.get("/layers")
    def layers() -> LayerReport:
        """Which isolation layers are active on this host, which are missing and why, which are required."""
        return sandbox().layer_report()

    return router
