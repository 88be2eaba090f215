"""Smoke pipeline: proves bus, blob store, workers and jobs work together.

Each item is a payload blob; the metrics service's worker on the `smoke.digest` queue reads it by key,
checks its checksum and stores its digest (services/metrics/digest.py). The job collects the digests in order.
"""
from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, Field, model_validator

from flawforge.jobs.context import JobContext
from flawforge.jobs.pipeline import Pipeline, register
from flawforge.proto.smoke import DIGEST, DigestRequested

MAX_TOTAL_BYTES = 1 << 30  # of all payloads of one job


class SmokeParams(BaseModel):
    model_config = {"extra": "forbid"}
    count: int = Field(20, ge=1, le=100_000, description="Work items to send through the bus.")
    payload_bytes: int = Field(1024, ge=1, le=1 << 20, description="Size of each payload blob.")

    @model_validator(mode="after")
    def _bounded_total(self) -> "SmokeParams":
        if self.count * self.payload_bytes > MAX_TOTAL_BYTES:
            raise ValueError(f"count x payload_bytes is {self.count * self.payload_bytes:,} bytes; a smoke job "
                             f"sends at most {MAX_TOTAL_BYTES:,}")
        return self


def payload_for(job_id: str, item: int, size: int) -> bytes:
    seed = hashlib.sha256(f"{job_id}:{item}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def run(ctx: JobContext, params: SmokeParams) -> None:
    store = ctx.platform.store
    names = []
    for item in range(params.count):
        ctx.check_cancelled()
        ref = store.put_content("smoke/payloads", payload_for(ctx.job_id, item, params.payload_bytes))
        ctx.publish(DIGEST, DigestRequested(job_id=ctx.job_id, item=item, payload=ref))
        names.append(f"{item}.json")
    results = dict(ctx.results_as_done(DIGEST, names, message="digests"))
    digests = [results[name].sha256 for name in names]
    ctx.put_artifact("digests.json", json.dumps({"count": len(digests), "sha256": digests}, indent=1).encode())


PIPELINE = register(Pipeline(name="smoke", description="Round trip of payload blobs through the bus.",
                             params=SmokeParams, owner="metrics", run=run))
