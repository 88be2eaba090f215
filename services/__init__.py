"""The Flawforge services. Each subpackage declares one `SERVICE` (a ServiceSpec).

Specs are imported by name on demand, so a light service never imports a heavy one's
dependencies (torch lives only in the inference-server).
"""
from __future__ import annotations

import importlib
from typing import Sequence

from flawforge.runtime.service import Consumer, ServiceSpec

SERVICE_NAMES = ("template-loader", "mutator", "trace-executor", "llm-gateway", "inference-server", "metrics")


def load_service(name: str) -> ServiceSpec:
    if name not in SERVICE_NAMES:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(SERVICE_NAMES)}")
    module = importlib.import_module(f"flawforge.services.{name.replace('-', '_')}")
    return module.SERVICE


def consumers_of(spec: ServiceSpec, pipelines: Sequence[str] | None = None) -> list[Consumer]:
    """The service's own queues plus the job queues of the pipelines it owns (of `pipelines` only, if named)."""
    from flawforge.jobs.pipeline import pipeline_named
    from flawforge.jobs.pipeline import pipelines as every_pipeline
    from flawforge.jobs.runner import job_consumer

    owned = every_pipeline().values() if pipelines is None else [pipeline_named(name) for name in pipelines]
    return list(spec.queue_consumers()) + [job_consumer(p) for p in owned if p.owner == spec.name]


def queue_consumers() -> dict[str, str]:
    """Queue -> the service that consumes it (the one to start when nobody does)."""
    return {consumer.queue: name for name in SERVICE_NAMES for consumer in consumers_of(load_service(name))}
