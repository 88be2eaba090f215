"""The assembler: puts a service together from its spec, the jobs machinery and a platform, and hands the
runtime what it runs (routers, queue consumers, bus middleware, background tasks).

`flawforge serve`, the embedded stack and a service served from this process all build through here, so
the runtime (flawforge/runtime) knows no service and no job.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from flawforge.blobstore import BlobStore
from flawforge.bus.base import Middleware
from flawforge.runtime.embedded import EmbeddedStack
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import ServiceSpec
from flawforge.settings import Settings

if TYPE_CHECKING:  # the embedded stack never imports the web framework
    from fastapi import FastAPI

# Every service but the inference-server (torch), whose consumers an embedded run starts only for its pipelines.
EMBEDDED_SERVICES = ("template-loader", "mutator", "trace-executor", "llm-gateway", "metrics")


def job_middleware(store: BlobStore) -> list[Middleware]:
    """What every bus does for jobs: a dead-lettered work item fails its job at once; the work items of a
    finished or cancelled job are not worked on."""
    from flawforge.jobs.dead_letters import JobDeadLetters
    from flawforge.jobs.finished import SkipWorkOfFinishedJobs

    return [JobDeadLetters(store), SkipWorkOfFinishedJobs(store)]


def queue_owner(queue: str) -> str | None:
    """The service that consumes the queue (the one to start when nobody does)."""
    from flawforge.services import queue_consumers

    return queue_consumers().get(queue)


def platform_for(settings: Settings) -> Platform:
    return Platform.from_settings(settings, job_middleware, queue_owner)


def service_app(service: str | ServiceSpec, platform: Platform, *, run_worker: bool | None = None) -> "FastAPI":
    """The service's HTTP app: its routers and the jobs API, its consumers and the pipelines it owns, the job
    retention sweep."""
    from flawforge.jobs.api import jobs_router
    from flawforge.jobs.retention import RetentionSweeper
    from flawforge.runtime.app import create_app
    from flawforge.services import consumers_of, load_service

    spec = load_service(service) if isinstance(service, str) else service
    return create_app(spec, platform, routers=[jobs_router, *spec.router_factories()], consumers=consumers_of(spec),
                      background=[RetentionSweeper(platform)], run_worker=run_worker)


def served_app(service: str, settings: Settings) -> tuple["FastAPI", Platform]:
    """A platform from the settings and the service's app on it (the caller closes the platform)."""
    platform = platform_for(settings)
    return service_app(service, platform), platform


def embedded_stack(settings: Settings, services: Sequence[str] = EMBEDDED_SERVICES,
                   pipelines: Sequence[str] | None = None) -> EmbeddedStack:
    """The named services' consumers in this process, on one platform, with the job queues of `pipelines` only
    where named. It opens no port, so nothing calls it without a token: anything served from its platform is
    explicitly unauthenticated rather than refused."""
    from flawforge.services import consumers_of, load_service

    platform = platform_for(settings.model_copy(update={"auth": "disabled"}))
    return EmbeddedStack(platform, [c for name in services for c in consumers_of(load_service(name), pipelines)])


def service_ports() -> dict[str, int]:
    """Every service's own port."""
    from flawforge.services import SERVICE_NAMES, load_service

    return {name: load_service(name).port for name in SERVICE_NAMES}
