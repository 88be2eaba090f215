"""The batch worker: runs each queued batch of the OpenAI Batch API on the served model."""
from __future__ import annotations

import logging

from flawforge.inference import openai_api
from flawforge.inference.batches import BatchStore, FileStore, run_batch
from flawforge.inference.errors import RequestError
from flawforge.proto.inference import BATCH_QUEUE, BatchRequested
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer
from flawforge.services.inference_server.host import host_for

log = logging.getLogger(__name__)



def make_batch_handler(platform: Platform):
    settings = platform.settings
    host = host_for(settings).start()
    batches, files = BatchStore(platform.store), FileStore(platform.store)
    caller_limits = openai_api.CallerLimits.from_settings(settings)

    def handle(message: BatchRequested) -> None:
        try:
            batch = batches.get(message.batch_id)
        except RequestError:
            log.warning("batch %s is not recorded; dropping its request", message.batch_id)
            return
        limits = caller_limits.of(batch.created_by)

        def execute(endpoint: str, body: dict) -> dict:
            # Waits for the model; a model that failed to load fails each request with a 503 line.
            return openai_api.execute(host.wait(), endpoint, body, limits)

        run_batch(batches, files, message.batch_id, execute)

    return handle


BATCH_CONSUMER = Consumer(queue=BATCH_QUEUE, make_handler=make_batch_handler)
