"""Embedded mode: every service's workers in one process, on the in-memory bus and a local folder."""
from __future__ import annotations

from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Workers
from flawforge.settings import Settings


class EmbeddedStack:
    """Starts the workers of the named services (all light ones by default) on one platform."""

    DEFAULT_SERVICES = ("template-loader", "mutator", "trace-executor", "llm-gateway", "metrics")

    def __init__(self, settings: Settings, services: tuple[str, ...] = DEFAULT_SERVICES):
        from flawforge.services import consumers_of, load_service

        # The embedded stack opens no port, so nothing calls it without a token: anything served from its platform
        # (a test app, say) is explicitly unauthenticated rather than refusing to start.
        self.platform = Platform.from_settings(settings.model_copy(update={"auth": "disabled"}))
        consumers = [c for name in services for c in consumers_of(load_service(name))]
        self.workers = Workers(self.platform, consumers)

    def __enter__(self) -> "EmbeddedStack":
        self.workers.start()
        return self

    def __exit__(self, *exc) -> None:
        self.workers.stop()
        self.platform.close()
