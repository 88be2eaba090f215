"""In-memory bus: the embedded default and the reference for the contract tests."""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import Counter, deque

from flawforge.bus.base import Bus, Delivery, Handler, dead_letter_headers, retry_headers
from flawforge.errors import BusUnavailable


class MemoryBus(Bus):
    # A waiting consumer's longest sleep: it then releases delayed messages that fell due.
    poll_s = 0.1

    def __init__(self, middleware=None):
        super().__init__(middleware)
        self._lock = threading.Lock()  # guards the state below
        # One condition per queue, on that lock: a publish wakes one consumer of its own queue, not all.
        self._ready: dict[str, threading.Condition] = {}
        self._queues: dict[str, deque[Delivery]] = {}
        self._dlq: dict[str, list[Delivery]] = {}
        self._delayed: list[tuple[float, int, Delivery]] = []  # (due, tiebreak, delivery)
        self._seq = itertools.count()
        self._closed = False
        self._consumers: Counter[str] = Counter()

    def declare(self, queue: str) -> None:
        with self._lock:
            if queue not in self._queues:
                self._queues[queue] = deque()
                self._ready[queue] = threading.Condition(self._lock)
            self._dlq.setdefault(queue, [])

    def publish_raw(self, queue: str, body: bytes, message_id: str, headers: dict) -> None:
        with self._lock:
            if self._closed:
                raise BusUnavailable("in-memory bus is closed")
            if queue not in self._queues:
                raise BusUnavailable(f"no queue named {queue!r} (declare it first)")
            self._queues[queue].append(Delivery(queue, message_id, bytes(body), dict(headers)))
            self._ready[queue].notify()

    def _release_due(self) -> float | None:
        """Moves due delayed messages to their queues; returns seconds until the next one."""
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, delivery = heapq.heappop(self._delayed)
            self._queues[delivery.queue].append(delivery)
            self._ready[delivery.queue].notify()
        return (self._delayed[0][0] - now) if self._delayed else None

    def _take(self, queue: str, stop: threading.Event) -> Delivery | None:
        with self._lock:
            while not stop.is_set() and not self._closed:
                wait = self._release_due()
                if self._queues[queue]:
                    return self._queues[queue].popleft()
                self._ready[queue].wait(timeout=min(wait, self.poll_s) if wait is not None else self.poll_s)
            return None

    def consume(self, queue: str, handler: Handler, stop: threading.Event) -> None:
        self.declare(queue)
        with self._lock:
            self._consumers[queue] += 1
        try:
            while True:
                delivery = self._take(queue, stop)
                if delivery is None:
                    return
                try:
                    self.process(delivery, handler)
                except BaseException:
                    # Not acknowledged: put it back, as a broker would for a dead consumer.
                    with self._lock:
                        self._queues[queue].appendleft(delivery)
                        self._ready[queue].notify()
                    raise
        finally:
            with self._lock:
                self._consumers[queue] -= 1

    def consumer_count(self, queue: str) -> int:
        with self._lock:
            return self._consumers[queue]

    def retry_later(self, delivery: Delivery, delay_ms: int, reason: str) -> None:
        retry = Delivery(delivery.queue, delivery.message_id, delivery.body, retry_headers(delivery, reason))
        with self._lock:
            heapq.heappush(self._delayed, (time.monotonic() + delay_ms / 1000, next(self._seq), retry))

    def dead_letter(self, delivery: Delivery, reason: str) -> None:
        with self._lock:
            self._dlq[delivery.queue].append(
                Delivery(delivery.queue, delivery.message_id, delivery.body, dead_letter_headers(delivery, reason)))

    def dead_letters(self, queue: str) -> list[Delivery]:
        with self._lock:
            out, self._dlq[queue] = self._dlq.get(queue, []), []
            return out

    def depth(self, queue: str) -> int:
        with self._lock:
            self._release_due()
            return len(self._queues.get(queue, ()))

    def purge(self, queue: str) -> None:
        with self._lock:
            self._queues[queue] = deque()
            self._dlq[queue] = []
            self._delayed = [d for d in self._delayed if d[2].queue != queue]
            heapq.heapify(self._delayed)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.wake_consumers()

    def wake_consumers(self) -> None:
        with self._lock:
            for ready in self._ready.values():
                ready.notify_all()
