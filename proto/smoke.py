"""Messages of the smoke pipeline: a payload goes through the bus and comes back as an artifact."""
from __future__ import annotations

from flawforge.proto.base import BlobRef, Message


DIGEST_QUEUE = "smoke.digest"  # DigestRequested


class DigestRequested(Message):
    kind = "smoke.digest_requested"
    job_id: str
    item: int
    payload: BlobRef
