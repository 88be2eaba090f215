"""The platform's Prometheus metrics, defined once; /metrics of each service exports them. No web framework
here: the embedded stack and the sandbox record into these too.

Each is recorded at the one seam its events pass through: HTTP requests in http_metrics.HttpMetrics
(an ASGI middleware of every service app), job states in the job runner, sandbox outcomes in the sandbox
engine, model calls in the llm-gateway, the generation batch in the inference-server's scheduler; bus
messages in the bus's own Metrics middleware.
"""
from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

HTTP_REQUESTS = Counter("flawforge_http_requests_total", "HTTP requests answered",
                        ["service", "method", "route", "status"])
HTTP_SECONDS = Histogram("flawforge_http_request_seconds", "HTTP request latency, to the end of the answer",
                         ["service", "method", "route"])
JOB_STATES = Counter("flawforge_jobs_total", "Jobs entering each state", ["pipeline", "state"])
JOBS_RUNNING = Gauge("flawforge_jobs_running", "Jobs running in this process", ["pipeline"])
SANDBOX_OUTCOMES = Counter("flawforge_sandbox_units_total", "Sandboxed programs by outcome", ["outcome"])
MODEL_REQUESTS = Counter("flawforge_model_requests_total", "Model calls by the gateway (cache hits excluded)",
                         ["provider", "model", "outcome"])
MODEL_TOKENS = Counter("flawforge_model_tokens_total", "Tokens of model calls", ["provider", "model", "kind"])
GENERATION_ROWS = Gauge("flawforge_generation_rows", "Sequences decoding together in the inference-server's batch")
GENERATION_WAITING = Gauge("flawforge_generation_waiting", "Requests waiting for room in the inference-server's batch")
MODEL_SECONDS = Histogram("flawforge_model_request_seconds", "Model call latency", ["provider", "model"],
                          buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))


class PublicMetrics:
    """The registry less what says what the platform works on (jobs by pipeline, model calls by provider and
    model, sandbox outcomes, bus queues): what /metrics shows a caller without an operator or service token.
    HTTP requests by route template and status stay, and the process's own metrics (CPU, memory, GC)."""

    def collect(self):
        for family in REGISTRY.collect():
            if not family.name.startswith("flawforge_") or family.name.startswith("flawforge_http_"):
                yield family


PUBLIC_METRICS = PublicMetrics()
