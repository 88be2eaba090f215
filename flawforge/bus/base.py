"""The bus contract.

A backend moves bytes between named queues and knows how to ack, delay-retry and
dead-letter a delivery. Everything else (decoding, retry policy, idempotency,
metrics) is shared here or lives in middleware, so both backends behave the same.
"""
from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable

from pydantic import ValidationError

from flawforge.proto import import_all
from flawforge.proto.base import Message, registry

log = logging.getLogger(__name__)

ATTEMPT_HEADER = "x-flawforge-attempt"
KIND_HEADER = "x-flawforge-kind"
ERROR_HEADER = "x-flawforge-error"

Handler = Callable[[Message], None]


@dataclass
class Delivery:
    queue: str
    message_id: str
    body: bytes
    headers: dict = field(default_factory=dict)
    _message: Message | None = field(default=None, repr=False, compare=False)  # decoded once, for every reader

    @property
    def attempt(self) -> int:
        return int(self.headers.get(ATTEMPT_HEADER, 1))

    @property
    def error(self) -> str | None:
        return self.headers.get(ERROR_HEADER)

    def decode(self) -> Message:
        if self._message is not None:
            return self._message
        kind = self.headers.get(KIND_HEADER)
        if kind not in registry:
            import_all()  # a worker may not have imported the module defining this kind yet
        cls = registry.get(kind)
        if cls is None:
            raise PoisonMessage(f"unknown message kind {kind!r}")
        try:
            self._message = cls.model_validate_json(self.body)
        except ValidationError as exc:
            raise PoisonMessage(f"invalid {kind} message: {exc}") from exc
        return self._message


class PoisonMessage(Exception):
    """A message that can never succeed (undecodable): dead-lettered without retries."""


class SkipMessage(Exception):
    """Raised by middleware before processing: acknowledge without running the handler."""


class Middleware:
    """Hooks around message processing, after dramatiq's middleware."""

    def before_process(self, bus: "Bus", delivery: Delivery) -> None:
        pass

    def after_process(self, bus: "Bus", delivery: Delivery) -> None:
        pass

    def on_failure(self, bus: "Bus", delivery: Delivery, exc: BaseException) -> int | None:
        """Returns a retry delay in milliseconds, or None to leave the decision to others."""
        return None

    def after_dead_letter(self, bus: "Bus", delivery: Delivery, reason: str) -> None:
        """Called once a delivery sits in its dead-letter queue."""


class Bus(ABC):
    def __init__(self, middleware: list[Middleware] | None = None):
        self.middleware = list(middleware or [])

    # --- backend primitives -------------------------------------------------------------
    @abstractmethod
    def declare(self, queue: str) -> None:
        """Creates the queue and its retry and dead-letter companions, if missing."""

    @abstractmethod
    def publish_raw(self, queue: str, body: bytes, message_id: str, headers: dict) -> None:
        """Durably enqueues; raises BusUnavailable if the broker did not confirm it."""

    @abstractmethod
    def consume(self, queue: str, handler: Handler, stop: threading.Event) -> None:
        """Processes messages until `stop` is set. Blocks."""

    @abstractmethod
    def retry_later(self, delivery: Delivery, delay_ms: int, reason: str) -> None:
        """Re-enqueues after a delay with the attempt count increased."""

    @abstractmethod
    def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Moves to the queue's dead-letter queue, keeping the reason."""

    @abstractmethod
    def dead_letters(self, queue: str) -> list[Delivery]:
        """Removes and returns what sits in the queue's dead-letter queue."""

    @abstractmethod
    def depth(self, queue: str) -> int:
        """Messages ready in the queue."""

    @abstractmethod
    def purge(self, queue: str) -> None:
        """Empties the queue and its companions."""

    @abstractmethod
    def consumer_count(self, queue: str) -> int:
        """Consumers attached to the queue now (0 for a queue nobody declared)."""

    def ping(self) -> None:
        """Raises BusUnavailable when the broker cannot be used."""

    def close(self) -> None:
        pass

    def wake_consumers(self) -> None:
        """Consumers' stop events were set: those blocked waiting for a message look at them now rather than
        at their next poll (a broker's consumers poll briefly enough)."""

    # --- shared behaviour ---------------------------------------------------------------
    def publish(self, queue: str, message: Message) -> None:
        self.publish_raw(queue, message.model_dump_json().encode(), message.message_id,
                         {KIND_HEADER: message.kind, ATTEMPT_HEADER: 1})

    def publish_many(self, queue: str, messages: list[Message]) -> None:
        """Publishes a batch; backends may overlap the broker's confirms."""
        for message in messages:
            self.publish(queue, message)

    def _dead_letter(self, delivery: Delivery, reason: str) -> None:
        self.dead_letter(delivery, reason)
        # The dead letter is stored, with its reason: the delivery is finished with. A hook that cannot record it
        # elsewhere (a broken blob store) must not fail the delivery, which would be redelivered and dead-lettered
        # again, a copy each time.
        for m in self.middleware:
            try:
                m.after_dead_letter(self, delivery, reason)
            except Exception:
                log.exception("dead letter %s of %s is in its dead-letter queue, but %s could not record it",
                              delivery.message_id, delivery.queue, type(m).__name__)

    def process(self, delivery: Delivery, handler: Handler) -> None:
        """Runs one delivery through middleware and handler.

        Returns once the delivery is finished with (done, skipped, retried elsewhere or dead-lettered), so the
        backend may acknowledge it; raises when its work, its retry copy or its dead letter could not be
        stored, so that it is not acknowledged.
        """
        try:
            for m in self.middleware:
                m.before_process(self, delivery)
            handler(delivery.decode())
        except SkipMessage:
            return
        except PoisonMessage as exc:
            self._dead_letter(delivery, f"poison: {exc}")
            return
        except Exception as exc:  # the handler's failure is data for the retry policy
            reason = f"{type(exc).__name__}: {exc}"
            delay = None
            for m in self.middleware:
                decided = m.on_failure(self, delivery, exc)
                if decided is not None:
                    delay = decided
            if delay is None:
                log.warning("dead-lettering %s from %s after attempt %d: %s",
                            delivery.message_id, delivery.queue, delivery.attempt, reason)
                self._dead_letter(delivery, reason)
            else:
                self.retry_later(delivery, delay, reason)
            return
        for m in reversed(self.middleware):
            m.after_process(self, delivery)


def retry_headers(delivery: Delivery, reason: str) -> dict:
    headers = {k: v for k, v in delivery.headers.items() if k.startswith("x-flawforge-")}
    headers[ATTEMPT_HEADER] = delivery.attempt + 1
    headers[ERROR_HEADER] = reason[:2000]
    return headers


def dead_letter_headers(delivery: Delivery, reason: str) -> dict:
    headers = {k: v for k, v in delivery.headers.items() if k.startswith("x-flawforge-")}
    headers[ERROR_HEADER] = reason[:2000]
    return headers

