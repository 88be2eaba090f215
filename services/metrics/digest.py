"""The smoke pipeline's work item, as the metrics service does it: a payload blob's checksum, stored as the
item's result."""
from __future__ import annotations

import hashlib
import json

from flawforge.jobs.context import item_key
from flawforge.proto.smoke import DIGEST_QUEUE, DigestRequested
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer


def make_digest_handler(platform: Platform):
    def handle(message: DigestRequested) -> None:
        data = platform.store.get_verified(message.payload)
        result = json.dumps({"item": message.item, "sha256": hashlib.sha256(data).hexdigest()}).encode()
        platform.store.put(item_key(message.job_id, f"{message.item}.json"), result)

    return handle


DIGEST_CONSUMER = Consumer(queue=DIGEST_QUEUE, make_handler=make_digest_handler)
