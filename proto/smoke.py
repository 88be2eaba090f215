"""Messages of the smoke pipeline: a payload goes through the bus and comes back as an artifact."""
from __future__ import annotations

from pydantic import Field

from flawforge.proto.base import BlobRef, Message, Model, WorkUnit


class DigestRequested(Message):
    kind = "smoke.digest_requested"
    job_id: str
    item: int
    payload: BlobRef


class DigestResult(Model):
    """What the metrics service stores for a DigestRequested."""

    item: int
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="The payload's SHA-256, in hex.")


DIGEST = WorkUnit(queue="smoke.digest", message=DigestRequested, result=DigestResult)
