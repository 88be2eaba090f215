"""Embedded mode: services' workers in one process, on the in-memory bus and a local folder."""
from __future__ import annotations

from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer, Workers


class EmbeddedStack:
    """Runs the consumers it is given (flawforge.assembly.embedded_stack picks them) on one platform."""

    def __init__(self, platform: Platform, consumers: list[Consumer]):
        self.platform = platform
        self.workers = Workers(self.platform, consumers)
        self.stop_timeout_s = 10.0  # how long each worker thread gets to finish its message on exit

    def __enter__(self) -> "EmbeddedStack":
        self.workers.start()
        return self

    def __exit__(self, *exc) -> None:
        self.workers.stop(self.stop_timeout_s)
        self.platform.close()
