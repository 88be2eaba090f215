"""Delayed retries with a bounded number of attempts."""
from __future__ import annotations

from flawforge.bus.base import Delivery, Middleware


class Retries(Middleware):
    def __init__(self, max_attempts: int = 3, delays_ms: list[int] | tuple[int, ...] = (200, 1000, 5000)):
        if max_attempts < 1 or not delays_ms:
            raise ValueError("max_attempts must be >= 1 and delays_ms non-empty")
        self.max_attempts = max_attempts
        self.delays_ms = list(delays_ms)

    def delay_for(self, attempt: int) -> int:
        """Delay before attempt `attempt + 1`; the last configured delay repeats."""
        return self.delays_ms[min(attempt - 1, len(self.delays_ms) - 1)]

    def on_failure(self, bus, delivery: Delivery, exc: BaseException) -> int | None:
        if delivery.attempt >= self.max_attempts:
            return None
        return self.delay_for(delivery.attempt)
