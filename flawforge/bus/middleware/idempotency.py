"""Consumers idempotent on message id: a message whose work is recorded done is acknowledged unrun.

The marker is written after the handler succeeds and before the ack; a crash between
the two redelivers a message that is then skipped. A crash before the marker reruns the
handler, which is why handlers write content-addressed artifacts. Without a blob store the
markers are kept in memory: enough for a bus whose messages live no longer than the process
(the in-memory bus), and no file per message.
"""
from __future__ import annotations

from flawforge.blobstore.base import BlobStore
from flawforge.bus.base import Delivery, Middleware, SkipMessage


class Idempotency(Middleware):
    def __init__(self, store: BlobStore | None, prefix: str = "bus/processed"):
        self.store = store
        self.prefix = prefix
        self.processed: set[str] = set()  # the markers when there is no store

    def _key(self, delivery: Delivery) -> str:
        return f"{self.prefix}/{delivery.queue}/{delivery.message_id}"

    def before_process(self, bus, delivery: Delivery) -> None:
        key = self._key(delivery)
        if key in self.processed if self.store is None else self.store.exists(key):
            raise SkipMessage()

    def after_process(self, bus, delivery: Delivery) -> None:
        if self.store is None:
            self.processed.add(self._key(delivery))  # set.add is atomic: consumer threads may share this
        else:
            self.store.put_if_absent(self._key(delivery), b"")
