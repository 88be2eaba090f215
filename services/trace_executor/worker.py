"""The trace-executor's bus worker: runs the unit a SandboxRequested message points to, stores the result."""
from __future__ import annotations

from pydantic import ValidationError

from flawforge.bus.base import PoisonMessage
from flawforge.proto.sandbox import EXECUTE_QUEUE, SandboxRequested
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer
from flawforge.sandbox.maximums import AboveMaximum
from flawforge.services.trace_executor.sandbox import REQUESTS, run_unit



def make_handler(platform: Platform):
    def handle(message: SandboxRequested) -> None:
        try:
            request = REQUESTS[message.unit].model_validate_json(platform.store.get_verified(message.request))
        except ValidationError as exc:
            raise PoisonMessage(f"invalid {message.unit} request: {exc}") from None
        try:
            result = run_unit(platform.settings, message.unit, request)
        except AboveMaximum as exc:
            raise PoisonMessage(f"{message.unit} request above the server's maximums: {exc}") from None
        platform.store.put(message.result_key, result.model_dump_json().encode())

    return handle


SANDBOX_CONSUMER = Consumer(queue=EXECUTE_QUEUE, make_handler=make_handler)
