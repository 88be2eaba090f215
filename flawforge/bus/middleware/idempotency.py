"""Consumers idempotent on message id: a message whose work is recorded done is acknowledged unrun.

The marker is written after the handler succeeds and before the ack; a crash between
the two redelivers a message that is then skipped. A crash before the marker reruns the
handler, which is why handlers write content-addressed artifacts.
"""
from __future__ import annotations

from flawforge.blobstore.base import BlobStore
from flawforge.bus.base import Delivery, Middleware, SkipMessage


class Idempotency(Middleware):
    def __init__(self, store: BlobStore, prefix: str = "bus/processed"):
        self.store = store
        self.prefix = prefix

    def _key(self, delivery: Delivery) -> str:
        return f"{self.prefix}/{delivery.queue}/{delivery.message_id}"

    def before_process(self, bus, delivery: Delivery) -> None:
        if self.store.exists(self._key(delivery)):
            raise SkipMessage()

    def after_process(self, bus, delivery: Delivery) -> None:
        self.store.put_if_absent(self._key(delivery), b"")
