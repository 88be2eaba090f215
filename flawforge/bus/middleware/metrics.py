"""Prometheus counters and timings of message processing."""
from __future__ import annotations

import threading
import time

from prometheus_client import Counter, Histogram

from flawforge.bus.base import Delivery, Middleware

PROCESSED = Counter("flawforge_messages_processed_total", "Messages handled successfully", ["queue"])
FAILED = Counter("flawforge_messages_failed_total", "Handler failures (each attempt)", ["queue"])
DURATION = Histogram("flawforge_message_seconds", "Handler duration", ["queue"])


class Metrics(Middleware):
    def __init__(self):
        self._started = threading.local()

    def before_process(self, bus, delivery: Delivery) -> None:
        self._started.t = time.perf_counter()

    def after_process(self, bus, delivery: Delivery) -> None:
        PROCESSED.labels(delivery.queue).inc()
        DURATION.labels(delivery.queue).observe(time.perf_counter() - getattr(self._started, "t", time.perf_counter()))

    def on_failure(self, bus, delivery: Delivery, exc: BaseException) -> None:
        FAILED.labels(delivery.queue).inc()
        return None
