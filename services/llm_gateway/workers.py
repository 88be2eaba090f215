"""Queue workers of the llm-gateway: single calls for pipelines, and driving persisted batches."""
from __future__ import annotations

from flawforge.jobs.store import JobStore
from flawforge.llm.batches import call_error
from flawforge.llm.errors import LLMError
from flawforge.llm.gateway import Gateway
from flawforge.llm.limits import CallScope
from flawforge.proto.llm import BATCH_QUEUE, CHAT_QUEUE, BatchDriveRequested, ChatRequest, ChatRequested, RowResult
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer



def make_chat_handler(platform: Platform):
    gateway = Gateway.from_settings(platform.store, platform.settings)
    jobs = JobStore(platform.store)

    def handle(message: ChatRequested) -> None:
        request = ChatRequest.model_validate_json(platform.store.get_verified(message.request))
        scope = CallScope(job_id=message.job_id, is_cancelled=lambda: jobs.get(message.job_id).cancel_requested)
        try:
            row = RowResult(custom_id=message.item, result=gateway.chat(request, scope))
        except LLMError as exc:  # already retried inside the gateway: the error is the item's result
            row = RowResult(custom_id=message.item, error=call_error(exc))
        platform.store.put(f"jobs/{message.job_id}/items/{message.item}", row.model_dump_json().encode(),
                           "application/json")

    return handle


def make_batch_handler(platform: Platform):
    gateway = Gateway.from_settings(platform.store, platform.settings)

    def handle(message: BatchDriveRequested) -> None:
        # Rows sent again spend the budget of the caller who sent the batch, as its first sending did.
        creator = gateway.batches.get(message.batch_id).created_by
        gateway.batches.wait(message.batch_id, gateway.caller_scope(creator) if creator else CallScope())

    return handle


CHAT_CONSUMER = Consumer(queue=CHAT_QUEUE, make_handler=make_chat_handler)
BATCH_CONSUMER = Consumer(queue=BATCH_QUEUE, make_handler=make_batch_handler)
