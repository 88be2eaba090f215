"""The trace-executor's sandbox, called over its HTTP API: the same calls as the in-process Sandbox.

On a stack only the trace-executor runs untrusted code (it alone has gVisor and the egress
NetworkPolicy); the template-loader's validations and the mutator's mutant runs come here
when FLAWFORGE_SANDBOX_URL names it. Made by `Sandbox.from_settings`, never directly.
The service splits a batch over its own slots, so `parallel` is the service's business here. A batch is
sent as requests that each ask for at most `max_request_s` (its programs times their timeout), the
service's FLAWFORGE_SANDBOX_MAX_REQUEST_S.
"""
from __future__ import annotations

import base64

import httpx
from pydantic import BaseModel

from flawforge.errors import InvalidInput
from flawforge.proto.sandbox import (BatchRequest, BatchResult, ExecRequest, ExecutionResult, LayerReport,
                                     SandboxLimits, SuiteExecRequest, SuiteRunResult, TestRunRequest, TestRunResult)
from flawforge.sandbox.engine import SandboxUnavailable

# Besides the units' own time: the request's transfer and a wait for a free slot on a busy service.
MARGIN_S = 120.0
LAYERS_TIMEOUT_S = 30.0
CONNECTIONS = 32


class RemoteSandbox:
    """Units run by the trace-executor at `url`, authenticated with `token`. Thread-safe.

    `required_layers` are checked against the service's at start: a missing one raises
    SandboxUnavailable, as for an in-process sandbox."""

    def __init__(self, url: str, token: str, limits: SandboxLimits, required_layers: tuple[str, ...] = (),
                 max_request_s: float = float("inf")):
        self.url = url.rstrip("/")
        self.limits = limits
        self.max_request_s = max_request_s
        self.required_layers = tuple(required_layers)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=self.url, headers=headers,
                                    limits=httpx.Limits(max_connections=CONNECTIONS))
        try:
            report = self.layer_report()
        except BaseException:
            self.close()
            raise
        missing = [layer for layer in self.required_layers if layer not in report.active]
        if missing:
            self.close()
            raise SandboxUnavailable(f"the sandbox at {self.url} lacks required isolation layer(s): "
                                     + "; ".join(f"{layer}: {report.missing.get(layer, 'not active')}"
                                                 for layer in missing))

    def _call(self, method: str, path: str, body: BaseModel | None, answer: type[BaseModel],
              timeout_s: float) -> BaseModel:
        """The service's answer as `answer`; it may take `timeout_s` (the units' limits and a margin)."""
        content = body.model_dump_json().encode() if body is not None else None
        try:
            response = self._client.request(method, path, content=content, timeout=timeout_s,
                                            headers={"Content-Type": "application/json"} if content else None)
        except httpx.HTTPError as exc:
            raise SandboxUnavailable(f"the sandbox at {self.url} did not answer: {exc}") from None
        if response.status_code == 422:
            raise InvalidInput(f"the sandbox at {self.url} refused the request: {_detail(response)}")
        if response.status_code != 200:
            raise SandboxUnavailable(f"the sandbox at {self.url} answered {response.status_code}: "
                                     f"{_detail(response)}")
        return answer.model_validate_json(response.content)

    def layer_report(self) -> LayerReport:
        return self._call("GET", "/sandbox/layers", None, LayerReport, LAYERS_TIMEOUT_S)

    def execute(self, source: str, call: str | None = None, *, trace: bool = False,
                limits: SandboxLimits | None = None) -> ExecutionResult:
        limits = limits or self.limits
        return self._call("POST", "/sandbox/exec", ExecRequest(source=source, call=call, trace=trace, limits=limits),
                          ExecutionResult, limits.timeout_s + MARGIN_S)

    def trace_call(self, source: str, func: str = "solve", *, limits: SandboxLimits | None = None) -> ExecutionResult:
        return self.execute(source, func, trace=True, limits=limits)

    def _programs_per_request(self, limits: SandboxLimits) -> int:
        """Most programs (a batch's original included) one request may hold; at least two."""
        return max(2, int(self.max_request_s // limits.timeout_s))

    def trace_batch(self, original: str, variants: list[str], func: str = "solve", *,
                    limits: SandboxLimits | None = None, parallel: bool = True) -> list[ExecutionResult]:
        """In requests of as many variants as fit, each with the original (whose result the first one gives)."""
        limits = limits or self.limits
        size = self._programs_per_request(limits) - 1
        results: list[ExecutionResult] = []
        for start in range(0, max(1, len(variants)), size):
            part = variants[start:start + size]
            batch = self._call("POST", "/sandbox/batch", BatchRequest(original=original, variants=part, call=func,
                                                                      limits=limits),
                               BatchResult, limits.timeout_s * (1 + len(part)) + MARGIN_S)
            results += batch.results if not results else batch.results[1:]
        return results

    def run_tests(self, module_source: str, test_source: str, module_name: str, *,
                  limits: SandboxLimits | None = None) -> TestRunResult:
        limits = limits or self.limits
        return self._call("POST", "/sandbox/tests", TestRunRequest(module_source=module_source,
                                                                   test_source=test_source, module_name=module_name,
                                                                   limits=limits),
                          TestRunResult, limits.timeout_s + MARGIN_S)

    def run_suite(self, archive: bytes, overlay: dict[str, str] | None = None, *, source_roots: list[str] = ("",),
                  args: list[str] = (), coverage_files: list[str] | None = None,
                  limits: SandboxLimits | None = None, environment: str | None = None,
                  other_user: bool = False) -> SuiteRunResult:
        limits = limits or self.limits
        request = SuiteExecRequest(archive=base64.b64encode(archive), overlay=overlay or {},
                                   source_roots=list(source_roots), args=list(args),
                                   coverage=coverage_files is not None, coverage_files=coverage_files or [],
                                   limits=limits, environment=environment, other_user=other_user)
        return self._call("POST", "/sandbox/suite", request, SuiteRunResult, limits.timeout_s + MARGIN_S)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "RemoteSandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _detail(response: httpx.Response) -> str:
    """The service's error detail, shortened: never a whole body."""
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    return str(detail)[:500]
