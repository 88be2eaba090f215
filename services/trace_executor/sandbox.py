"""The one sandbox of a trace-executor process, built from its settings and shared by API and worker."""
from __future__ import annotations

import logging
import threading

from pydantic import BaseModel

from flawforge.proto.sandbox import BatchRequest, BatchResult, ExecRequest, TestRunRequest
from flawforge.sandbox import Sandbox
from flawforge.settings import Settings

log = logging.getLogger(__name__)

REQUESTS: dict[str, type[BaseModel]] = {"exec": ExecRequest, "batch": BatchRequest, "tests": TestRunRequest}

_lock = threading.Lock()
_sandboxes: dict[tuple, Sandbox] = {}


def sandbox_for(settings: Settings) -> Sandbox:
    """Starts the sandbox on first use (reporting its layers); raises SandboxUnavailable if a required one is missing."""
    key = tuple((name, value) for name, value in settings.model_dump().items() if name.startswith("sandbox_"))
    with _lock:
        sandbox = _sandboxes.get(key)
        if sandbox is None:
            sandbox = Sandbox.from_settings(settings)
            report = sandbox.layer_report()
            log.warning("sandbox isolation layers active: %s; missing: %s", ", ".join(report.active),
                        "; ".join(f"{k} ({v})" for k, v in report.missing.items()) or "none")
            _sandboxes[key] = sandbox
        return sandbox


def sandbox_isolation(platform) -> None:
    """Readiness: the sandbox has every required layer and runs a unit."""
    result = sandbox_for(platform.settings).execute("ready = True\n")
    if result.outcome != "ok":
        raise RuntimeError(f"a trivial unit ended {result.outcome}: {result.detail}")


def run_unit(sandbox: Sandbox, unit: str, request: BaseModel) -> BaseModel:
    """Runs a request of kind `unit` (a key of REQUESTS); the result is the matching result model."""
    if unit == "exec":
        return sandbox.execute(request.source, request.call, trace=request.trace, limits=request.limits)
    if unit == "batch":
        return BatchResult(results=sandbox.trace_batch(request.original, request.variants, request.call,
                                                       limits=request.limits))
    return sandbox.run_tests(request.module_source, request.test_source, request.module_name, limits=request.limits)
