"""The workers: each queued batch of the OpenAI Batch API, and each work item of a semantic-pressure study, run on
the served model."""
from __future__ import annotations

import logging

from flawforge.inference import openai_api
from flawforge.inference.batches import BatchStore, FileStore, run_batch
from flawforge.inference.errors import RequestError
from flawforge.inference.host import host_for, vllm_server
from flawforge.proto.inference import BATCH_QUEUE, BatchRequested
from flawforge.proto.pressure_work import STUDY_QUEUE, StudyWork
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer

log = logging.getLogger(__name__)


def make_batch_handler(platform: Platform):
    settings = platform.settings
    host = host_for(settings).start()
    upstream = vllm_server(settings)
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
            if upstream is not None:
                return upstream.execute(endpoint, body, limits)
            # Waits for the model; a model that failed to load fails each request with a 503 line.
            return openai_api.execute(host.wait(), endpoint, body, limits)

        run_batch(batches, files, message.batch_id, execute)

    return handle


BATCH_CONSUMER = Consumer(queue=BATCH_QUEUE, make_handler=make_batch_handler)


def make_study_handler(platform: Platform):
    host = host_for(platform.settings).start()

    def handle(message: StudyWork) -> None:
        from flawforge.pipelines.pressure_study import work_on

        backend = host.wait()  # a model that failed to load fails the item, which the bus retries elsewhere
        work_on(message, host.research_model(), backend, platform.store)

    return handle


STUDY_CONSUMER = Consumer(queue=STUDY_QUEUE, make_handler=make_study_handler)
