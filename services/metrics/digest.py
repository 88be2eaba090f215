"""The smoke pipeline's work item, as the metrics service does it: a payload blob's checksum, stored as the
item's result."""
from __future__ import annotations

import hashlib

from flawforge.jobs.context import item_key
from flawforge.proto.smoke import DIGEST, DigestRequested, DigestResult
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Actor


def make_digest_handler(platform: Platform):
    def handle(message: DigestRequested) -> None:
        data = platform.store.get_verified(message.payload)
        result = DigestResult(item=message.item, sha256=hashlib.sha256(data).hexdigest())
        platform.store.put(item_key(message.job_id, f"{message.item}.json"), result.model_dump_json().encode())

    return handle


DIGEST_ACTOR = Actor(DIGEST, make_digest_handler)
