"""The workers: each queued batch of the OpenAI Batch API, and each work item of a semantic-pressure study, run on
the served model."""
from __future__ import annotations

import logging

from flawforge.inference import openai_api
from flawforge.inference.batches import BatchStore, FileStore, run_batch
from flawforge.inference.errors import RequestError
from flawforge.inference.host import host_for, vllm_server
from flawforge.jobs.context import item_key
from flawforge.proto.inference import BATCH_QUEUE, BatchRequested
from flawforge.proto.pressure_work import STUDY_UNIT, StudyWork
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Actor, Consumer

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
        from flawforge.pressure.study_runner import work_on  # torch: only where the service runs, not with its spec

        backend = host.wait()  # a model that failed to load fails the item, which the bus retries elsewhere
        result = work_on(message, host.research_model(), backend, platform.store)
        platform.store.put(item_key(message.job_id, message.item), result.model_dump_json().encode())

    return handle


# One item at a time: a server's one model runs it (more servers, not threads, share a study).
STUDY_ACTOR = Actor(unit=STUDY_UNIT, make_handler=make_study_handler)
