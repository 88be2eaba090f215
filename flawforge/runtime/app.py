"""Builds the FastAPI app of a service: health, readiness, metrics, and the routers, consumers and background
tasks the assembler (flawforge.assembly) hands it."""
from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Callable, Protocol, Sequence

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from flawforge import __version__
from flawforge.errors import Unauthorized
from flawforge.runtime.auth import (PLATFORM_ROLES, Authenticator, BearerAuthMiddleware, allow, caller,
                                    declares_roles, platform_caller)
from flawforge.runtime.docs import serve_docs_locally
from flawforge.runtime.framing import NoFraming
from flawforge.runtime.http_metrics import HttpMetrics
from flawforge.runtime.http_errors import BodyLimitMiddleware, ErrorAnswer, ErrorAnswers, JsonBodyCheck
from flawforge.runtime.metrics import PUBLIC_METRICS
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer, ServiceSpec, Workers

log = logging.getLogger(__name__)


class Background(Protocol):
    """A task that runs beside the app while it serves."""

    def start(self) -> object: ...

    def stop(self) -> None: ...


def create_app(spec: ServiceSpec, platform: Platform, *, routers: Sequence[Callable[[Platform], APIRouter]],
               consumers: Sequence[Consumer], background: Sequence[Background] = (),
               run_worker: bool | None = None) -> FastAPI:
    """`routers` are the factories of the service's API routers (every one wants a token), `consumers` its
    queues, `background` what runs while it serves; the spec gives its name, pages, readiness checks and
    error formats."""
    authenticator = Authenticator(platform.settings)  # before anything starts: no tokens, no service
    run_worker = platform.settings.run_worker if run_worker is None else run_worker
    workers = Workers(platform, list(consumers))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if run_worker and consumers:
            workers.start()
        for task in background:
            task.start()
        yield
        for task in reversed(background):
            task.stop()
        workers.stop()

    app = FastAPI(title=f"flawforge {spec.name}", description=spec.description, version=__version__,
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    serve_docs_locally(app)
    app.state.platform = platform
    app.state.workers = workers
    answers = ErrorAnswers(spec.error_format_functions())
    answers.install(app)

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict:
        """The process is up."""
        return {"status": "ok", "service": spec.name}

    @app.get("/readyz", tags=["ops"])
    def readyz(request: Request) -> JSONResponse:
        """The service's real dependencies answer and its workers run. What failed is said only to an operator
        or service token (it may name an address); without one, each check is `ok` or `failed`."""
        detailed = platform_caller(request)
        checks: dict[str, str] = {}
        for name, check in [("bus", lambda p: p.bus.ping()), ("blob_store", lambda p: p.store.ping())] + [
            (c.__name__, c) for c in spec.readiness_checks
        ]:
            try:
                check(platform)
                checks[name] = "ok"
            except Exception as exc:
                checks[name] = f"failed: {exc}" if detailed else "failed"
        if run_worker and consumers:
            failure = f"failed: {workers.errors or 'not running'}" if detailed else "failed"
            checks["workers"] = "ok" if workers.alive() else failure
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"ready": ready, "service": spec.name, "checks": checks}, status_code=200 if ready else 503)

    @app.get("/metrics", tags=["ops"])
    def metrics(request: Request) -> Response:
        """Prometheus metrics of this process: all of them for an operator or service token; without one, HTTP
        requests by route and status and the process's own (no jobs, pipelines, models or queues)."""
        return Response(generate_latest(REGISTRY if platform_caller(request) else PUBLIC_METRICS),
                        media_type=CONTENT_TYPE_LATEST)

    for make_page in spec.router_factories(spec.pages):
        app.include_router(make_page(platform))
    # The routes so far (FastAPI's docs, the ops routes above, the data-free pages) answer without a token; every
    # request for anything else is refused without one, whatever router adds it, before its body is read.
    public_routes = list(app.routes)

    def refuse(scope, exc: Unauthorized) -> JSONResponse:
        return answers.response(scope["path"], ErrorAnswer(exc.http_status, exc.code, str(exc)),
                                headers={"WWW-Authenticate": "Bearer"})

    # The last added runs first: the token is checked before the body limit counts a byte, and a JSON body is
    # checked whole (within the limit) before any route parses it.
    app.add_middleware(JsonBodyCheck, answers=answers)
    app.add_middleware(BodyLimitMiddleware, max_bytes=platform.settings.max_request_bytes, answers=answers)
    app.add_middleware(BearerAuthMiddleware, authenticator=authenticator, public_routes=lambda: public_routes,
                       refuse=refuse)
    # Outermost: every request is counted and timed, those refused before routing included.
    app.add_middleware(HttpMetrics, service=spec.name, routes=lambda: app.routes)
    app.add_middleware(NoFraming)
    # Included with `caller` so the OpenAPI document shows the token each route wants; a router that declares
    # no roles serves the platform's (operators and services), never reviewers.
    for make_router in routers:
        router = make_router(platform)
        roles = [] if declares_roles(router) else [allow(*PLATFORM_ROLES)]
        app.include_router(router, dependencies=[Depends(caller), *roles])
    return app
