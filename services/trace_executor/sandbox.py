"""The one sandbox of a trace-executor process, built from its settings and shared by API and worker."""
from __future__ import annotations

import logging
import threading

from pydantic import BaseModel

from flawforge.proto.sandbox import BatchRequest, BatchResult, ExecRequest, SandboxLimits, TestRunRequest
from flawforge.sandbox import Sandbox
from flawforge.settings import Settings

log = logging.getLogger(__name__)

REQUESTS: dict[str, type[BaseModel]] = {"exec": ExecRequest, "batch": BatchRequest, "tests": TestRunRequest}

_lock = threading.Lock()
_sandboxes: dict[tuple, Sandbox] = {}


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def sandbox_for(settings: Settings) -> Sandbox:
    """Starts the sandbox on first use (reporting its layers); raises SandboxUnavailable if a required one is missing."""
    key = (_csv(settings.sandbox_required_layers), settings.sandbox_workers, settings.sandbox_timeout_s,
           settings.sandbox_memory_mb, _csv(settings.sandbox_read_paths), settings.sandbox_audit)
    with _lock:
        sandbox = _sandboxes.get(key)
        if sandbox is None:
            required, workers, timeout_s, memory_mb, read_paths, audit = key
            sandbox = Sandbox(SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb), workers=workers or None,
                              required_layers=required, read_paths=read_paths, audit=audit)
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
