"""Tells a waiting job that one of its work items was dead-lettered, so it fails at once.

Without this a job would wait for a result that can no longer come until its timeout.
"""
from __future__ import annotations

import json

from flawforge.blobstore import BlobStore
from flawforge.bus.base import Delivery, Middleware, PoisonMessage


def dead_item_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/dead/"


class JobDeadLetters(Middleware):
    def __init__(self, store: BlobStore):
        self.store = store

    def after_dead_letter(self, bus, delivery: Delivery, reason: str) -> None:
        try:
            job_id = getattr(delivery.decode(), "job_id", None)
        except PoisonMessage:
            return
        if job_id:
            record = {"queue": delivery.queue, "message_id": delivery.message_id, "reason": reason}
            self.store.put(f"{dead_item_prefix(job_id)}{delivery.message_id}.json", json.dumps(record).encode())
