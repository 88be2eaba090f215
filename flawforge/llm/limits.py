"""What bounds model calls: rate limits per provider, budgets and cancellation per job, retry backoff."""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from flawforge.llm.errors import BudgetExceeded, CallCancelled


class RateLimiter:
    """A token bucket of `per_minute` requests (bursts up to one second's worth) plus a concurrency cap."""

    def __init__(self, per_minute: float | None, max_concurrency: int, clock: Callable[[], float] = time.monotonic):
        self.rate = per_minute / 60.0 if per_minute else None
        self.capacity = max(1.0, self.rate or 1.0)
        self.tokens = self.capacity
        self.clock = clock
        self.updated = clock()
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(max_concurrency)

    def wait_time(self) -> float:
        """Takes a token if one is there (returns 0), else returns how long until one is."""
        if self.rate is None:
            return 0.0
        with self.lock:
            now = self.clock()
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
            self.updated = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return 0.0
            return (1.0 - self.tokens) / self.rate

    def acquire(self, check: Callable[[], None] = lambda: None) -> None:
        while (delay := self.wait_time()) > 0:
            check()
            time.sleep(min(delay, 1.0))
        self.slots.acquire()

    def release(self) -> None:
        self.slots.release()


class Budget:
    """A job's allowance of model requests and tokens; cache hits spend nothing."""

    def __init__(self, max_requests: int | None = None, max_tokens: int | None = None):
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.requests = 0
        self.tokens = 0
        self.lock = threading.Lock()

    def spend_request(self) -> None:
        with self.lock:
            if self.max_requests is not None and self.requests >= self.max_requests:
                raise BudgetExceeded(f"the job's budget of {self.max_requests} model requests is spent")
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                raise BudgetExceeded(f"the job's budget of {self.max_tokens} tokens is spent "
                                     f"({self.tokens} used)")
            self.requests += 1

    def spend_tokens(self, count: int) -> None:
        with self.lock:
            self.tokens += count


class WindowBudget(Budget):
    """An allowance renewed every `window_s` seconds: what a long-running door (the gateway's /llm/chat)
    may spend per hour, say."""

    def __init__(self, max_requests: int | None, max_tokens: int | None, window_s: float,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(max_requests, max_tokens)
        self.window_s = window_s
        self.clock = clock
        self.window_start = clock()

    def _renew(self) -> None:
        with self.lock:
            if self.clock() - self.window_start >= self.window_s:
                self.window_start, self.requests, self.tokens = self.clock(), 0, 0

    def spend_request(self) -> None:
        self._renew()
        try:
            super().spend_request()
        except BudgetExceeded as exc:
            left = self.window_s - (self.clock() - self.window_start)
            raise BudgetExceeded(f"{exc} for this window; it renews in {left:.0f} s") from None


@dataclass
class CallScope:
    """The job a call is made for: its budget and how to tell it was cancelled."""

    job_id: str | None = None
    budget: Budget = field(default_factory=Budget)
    is_cancelled: Callable[[], bool] = lambda: False

    def check(self) -> None:
        if self.is_cancelled():
            raise CallCancelled(f"job {self.job_id or '(none)'} was cancelled; no further model calls")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter, honouring a server's Retry-After when it gives one."""

    max_attempts: int = 4
    base_s: float = 0.5
    cap_s: float = 30.0

    def delay(self, attempt: int, retry_after_s: float | None = None) -> float:
        if retry_after_s is not None:
            return min(self.cap_s, retry_after_s)
        return random.uniform(0, min(self.cap_s, self.base_s * 2 ** (attempt - 1)))
