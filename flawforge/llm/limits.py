"""What bounds model calls: each provider's requests and tokens per minute and each caller's budget, kept in
Redis so every replica of the gateway spends the same allowance; a job's budget and cancellation, in its process.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterator

from flawforge.llm.errors import BudgetExceeded, CallCancelled, LimitsUnavailable, RateLimited
from flawforge.proto.llm import ProviderConfig

# A token bucket holding a minute's allowance, refilled continuously; its level may go below zero (tokens spent
# after a call that used more than was left), and then later calls wait until it is back above `need`. The clock
# is Redis's, so the replicas' own clocks do not matter. Returns "0" when `cost` was taken, else the seconds
# until it could be (as text: Redis turns a Lua number into an integer).
BUCKET = """
local rate, capacity = tonumber(ARGV[1]), tonumber(ARGV[2])
local cost, need = tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local state = redis.call('HMGET', KEYS[1], 'level', 'at')
local level = tonumber(state[1]) or capacity
level = math.min(capacity, level + math.max(0, now - (tonumber(state[2]) or now)) * rate)
if level < need then return tostring((need - level) / rate) end
level = level - cost
redis.call('HSET', KEYS[1], 'level', tostring(level), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil((capacity - level) / rate) + 1)
return '0'
"""

# A count per fixed window (an hour of a caller's budget): adds `amount` unless `limit` (>= 0) is reached.
# Returns {added (1/0), the count, seconds until the window renews}.
WINDOW = """
local window, amount, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local index = math.floor(now / window)
local key = KEYS[1] .. ':' .. index
local used = tonumber(redis.call('GET', key) or '0')
local left = (index + 1) * window - now
if limit >= 0 and used >= limit then return {0, used, tostring(left)} end
if amount > 0 then
  used = redis.call('INCRBY', key, amount)
  redis.call('EXPIRE', key, math.ceil(left) + 1)
end
return {1, used, tostring(left)}
"""

NO_NEED = -1e18  # a bucket's `need` when spending whatever its level: tokens a call has already used


class SharedCounters:
    """Counters in one Redis, each change one atomic script. Connected on first use: a gateway without limits
    or budgets never needs Redis."""

    def __init__(self, url: str, prefix: str):
        self.url = url
        self.prefix = prefix

    @cached_property
    def _scripts(self):
        import redis  # the gateway's extra; imported by the first limited call

        client = redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=5)
        return client.register_script(BUCKET), client.register_script(WINDOW)

    def _run(self, which: int, key: str, *args) -> list | bytes:
        import redis

        try:
            return self._scripts[which](keys=[f"{self.prefix}:llm:{key}"], args=list(args))
        except redis.RedisError as exc:
            raise LimitsUnavailable(f"the limits and budgets store at {self.url} (FLAWFORGE_REDIS_URL) cannot be "
                                    f"used ({type(exc).__name__}: {exc}); no model call is made without it") from None

    def close(self) -> None:
        if "_scripts" in self.__dict__:
            self._scripts[0].registered_client.close()

    def bucket(self, key: str, per_minute: float, cost: float, need: float = 1) -> float:
        """Takes `cost` from a bucket of `per_minute` once it holds `need`: 0, or the seconds until it will."""
        return float(self._run(0, key, per_minute / 60, per_minute, cost, need))

    def window(self, key: str, window_s: float, amount: int, limit: int | None) -> tuple[bool, int, float]:
        """Adds `amount` to this window's count unless it has reached `limit`: (added, count, seconds left)."""
        added, count, left = self._run(1, key, window_s, amount, -1 if limit is None else limit)
        return bool(added), int(count), float(left)


class ProviderRate:
    """One provider's requests and tokens per minute, shared by every replica; and its calls in flight, per
    process. A call waits up to `max_wait_s` for the minute's allowance, then is refused, saying when it would
    pass."""

    def __init__(self, config: ProviderConfig, counters: SharedCounters, max_wait_s: float):
        self.name = config.name
        self.requests_per_minute = config.requests_per_minute
        self.tokens_per_minute = config.tokens_per_minute
        self.counters = counters
        self.max_wait_s = max_wait_s
        self.slots = threading.BoundedSemaphore(config.max_concurrency)

    def _wait(self) -> tuple[float, str]:
        """0 once a request was taken from the minute's allowance, else how long until one can be and why."""
        if self.tokens_per_minute:
            wait = self.counters.bucket(f"tpm:{self.name}", self.tokens_per_minute, cost=0)
            if wait:
                return wait, f"{self.tokens_per_minute:g} tokens per minute"
        if self.requests_per_minute:
            wait = self.counters.bucket(f"rpm:{self.name}", self.requests_per_minute, cost=1)
            if wait:
                return wait, f"{self.requests_per_minute:g} requests per minute"
        return 0.0, ""

    @contextmanager
    def admitted(self, check: Callable[[], None] = lambda: None) -> Iterator[None]:
        """Holds one request of the allowance and a slot while the call runs."""
        started = time.monotonic()
        while (wait := self._wait())[0]:
            delay, what = wait
            if delay > self.max_wait_s - (time.monotonic() - started):
                raise RateLimited(f"provider {self.name!r} is at its limit of {what} (shared by every replica); "
                                  f"this call would pass in {delay:.1f} s", retry_after_s=delay)
            check()
            time.sleep(min(delay, 1.0))
        with self.slots:
            yield

    def spend_tokens(self, count: int) -> None:
        if self.tokens_per_minute and count:
            self.counters.bucket(f"tpm:{self.name}", self.tokens_per_minute, cost=count, need=NO_NEED)


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


class CallerBudget(Budget):
    """A caller's allowance per window (an hour), counted in Redis: every replica's /llm/chat, /llm/batches rows
    (their retries included) and /v1/chat/completions spend the same one."""

    def __init__(self, counters: SharedCounters, caller: str, max_requests: int | None, max_tokens: int | None,
                 window_s: float = 3600):
        super().__init__(max_requests, max_tokens)
        self.counters = counters
        self.caller = caller
        self.window_s = window_s

    def _within(self, kind: str, amount: int, limit: int, spent: str) -> None:
        """Adds `amount` to the window's count of `kind` unless `limit` is reached; `spent` says what is, {used}
        the count."""
        added, used, left = self.counters.window(f"budget:{self.caller}:{kind}", self.window_s, amount, limit)
        if not added:
            raise BudgetExceeded(f"{self.caller!r}'s budget of {limit} {spent.format(used=used)} for this window; it "
                                 f"renews in {left:.0f} s", retry_after_s=left)

    def spend_request(self) -> None:
        if self.max_tokens is not None:
            self._within("tokens", 0, self.max_tokens, "tokens is spent ({used} used)")
        if self.max_requests is not None:
            self._within("requests", 1, self.max_requests, "model requests is spent")

    def spend_tokens(self, count: int) -> None:
        if self.max_tokens is not None and count:
            self.counters.window(f"budget:{self.caller}:tokens", self.window_s, count, None)


@dataclass
class CallScope:
    """The job a call is made for: its budget and how to tell it was cancelled."""

    job_id: str | None = None
    budget: Budget = field(default_factory=Budget)
    is_cancelled: Callable[[], bool] = lambda: False

    def check(self) -> None:
        if self.is_cancelled():
            raise CallCancelled(f"job {self.job_id or '(none)'} was cancelled; no further model calls")
