"""Counts and times every HTTP request of a service app by route template and status (Prometheus)."""
from __future__ import annotations

import time
from typing import Callable

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flawforge.runtime.metrics import HTTP_REQUESTS, HTTP_SECONDS

UNMATCHED = "unmatched"  # one label for every path no route serves: a scan must not grow the label set


def route_of(scope: Scope, routes: list[BaseRoute]) -> str:
    """The path template of the route that served the request (/jobs/{job_id}, not /jobs/ab12...): routing
    records it in the scope; a request refused before routing (no token) is matched against the app's own
    routes, and one that matches none is UNMATCHED."""
    route = scope.get("route")
    if route is None:
        route = next((r for r in routes if hasattr(r, "path") and r.matches(scope)[0] == Match.FULL), None)
    return getattr(route, "path", None) or UNMATCHED


class HttpMetrics:
    """Counts every request and times it, by route template and status (those refused before routing too)."""

    def __init__(self, app: ASGIApp, service: str, routes: Callable[[], list[BaseRoute]]):
        self.app = app
        self.service = service
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees when the app fails before answering

        async def send_recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_recording)
        finally:
            route = route_of(scope, self.routes())
            HTTP_REQUESTS.labels(self.service, scope["method"], route, str(status)).inc()
            HTTP_SECONDS.labels(self.service, scope["method"], route).observe(time.perf_counter() - started)
