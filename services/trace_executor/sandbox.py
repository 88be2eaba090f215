"""The one sandbox of a trace-executor process, built from its settings and shared by API and worker."""
from __future__ import annotations

import importlib.util
import logging
import threading
import time

from pydantic import BaseModel

from flawforge.proto.sandbox import BatchRequest, BatchResult, ExecRequest, SuiteExecRequest, TestRunRequest, UnitKind
from flawforge.sandbox import Sandbox
from flawforge.sandbox.engine import Cancellation, csv_setting
from flawforge.sandbox.maximums import Maximums
from flawforge.sandbox.suites import suite_options, suite_read_paths
from flawforge.settings import Settings

log = logging.getLogger(__name__)

REQUESTS: dict[UnitKind, type[BaseModel]] = {UnitKind.EXEC: ExecRequest, UnitKind.BATCH: BatchRequest,
                                             UnitKind.TESTS: TestRunRequest, UnitKind.SUITE: SuiteExecRequest}
# A unit that ended well this recently shows the sandbox works: readiness need not queue one behind the load.
READY_WITHIN_S = 10.0

SANDBOX_SETTINGS = tuple(name for name in Settings.model_fields if name.startswith("sandbox_"))

_lock = threading.Lock()
_sandboxes: dict[tuple, Sandbox] = {}


def sandbox_for(settings: Settings, *, suites: bool = False) -> Sandbox:
    """Starts the sandbox on first use (reporting its layers); raises SandboxUnavailable if a required one is missing.

    Suites run in a sandbox of their own, made by the one recipe (flawforge.sandbox.suites.suite_options)."""
    key = (suites, *(getattr(settings, name) for name in SANDBOX_SETTINGS))
    with _lock:
        sandbox = _sandboxes.get(key)
        if sandbox is None:
            options = suite_options(settings) if suites else {
                "read_paths": [*csv_setting(settings.sandbox_read_paths), *suite_reads(settings)]}
            sandbox = Sandbox.from_settings(settings, in_process=True, **options)  # this service is where units run
            report = sandbox.layer_report()
            log.warning("sandbox isolation layers active: %s; missing: %s", ", ".join(report.active),
                        "; ".join(f"{k} ({v})" for k, v in report.missing.items()) or "none")
            _sandboxes[key] = sandbox
        return sandbox


def suite_reads(settings: Settings) -> list[str]:
    """What the plain sandbox's test runs read besides the settings' paths, where pytest is installed: what suite
    units read (the libraries' environments being the volume the mutator builds them in, mounted here at the same
    path)."""
    if importlib.util.find_spec("pytest") is None:
        return []
    return suite_read_paths(settings)


def sandbox_isolation(platform) -> None:
    """Readiness: the sandbox has every required layer and runs a unit (one that ended well in the last
    READY_WITHIN_S seconds counts: under load, a probe must not wait for a slot)."""
    sandbox = sandbox_for(platform.settings)
    if sandbox.zygote_pid() is not None and time.monotonic() - sandbox.last_unit_ok < READY_WITHIN_S:
        return
    result = sandbox.execute("ready = True\n")
    if result.outcome != "ok":
        raise RuntimeError(f"a trivial unit ended {result.outcome}: {result.detail}")


def run_unit(settings: Settings, unit: UnitKind, request: BaseModel,
             cancellation: Cancellation | None = None) -> BaseModel:
    """Runs a request of kind `unit` (a key of REQUESTS) in the process's sandbox; the result is the matching
    result model. A request above the server's maximums raises AboveMaximum, before anything runs. Setting
    `cancellation` kills its units (UnitsCancelled is raised)."""
    Maximums.from_settings(settings).check(request)
    sandbox = sandbox_for(settings, suites=unit == UnitKind.SUITE)
    with sandbox.cancelled_by(cancellation or Cancellation()):
        return _run(sandbox, unit, request)


def _run(sandbox: Sandbox, unit: UnitKind, request: BaseModel) -> BaseModel:
    if unit == UnitKind.EXEC:
        return sandbox.execute(request.source, request.call, trace=request.trace, limits=request.limits)
    if unit == UnitKind.BATCH:
        return BatchResult(results=sandbox.trace_batch(request.original, request.variants, request.call,
                                                       limits=request.limits))
    if unit == UnitKind.SUITE:
        return sandbox.run_suite(request.archive, request.overlay, source_roots=request.source_roots, args=request.args,
                                 coverage_files=request.coverage_files if request.coverage else None,
                                 limits=request.limits, environment=request.environment,
                                 other_user=request.other_user)
    return sandbox.run_tests(request.module_source, request.test_source, request.module_name, limits=request.limits)
