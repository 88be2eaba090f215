"""The Flawforge services. Each subpackage declares one `SERVICE` (a ServiceSpec).

Specs are imported by name on demand, so a light service never imports a heavy one's
dependencies (torch lives only in the inference-server).
"""
from __future__ import annotations

import importlib

from flawforge.runtime.service import Consumer, ServiceSpec

SERVICE_NAMES = ("template-loader", "mutator", "trace-executor", "llm-gateway", "inference-server", "metrics")


def load_service(name: str) -> ServiceSpec:
    if name not in SERVICE_NAMES:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(SERVICE_NAMES)}")
    module = importlib.import_module(f"flawforge.services.{name.replace('-', '_')}")
    return module.SERVICE


def consumers_of(spec: ServiceSpec) -> list[Consumer]:
    """The service's own queues plus the job queues of the pipelines it owns."""
    from flawforge.jobs.pipeline import pipelines
    from flawforge.jobs.runner import job_consumer

    return list(spec.consumers) + [job_consumer(p) for p in pipelines().values() if p.owner == spec.name]
